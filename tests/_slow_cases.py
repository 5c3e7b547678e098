"""The tests that run in the slow suite only (``python -m pytest -m slow``), besides the files that
mark themselves slow (reproductions, docs pages, examples, ``nqf validate``): issue 37's fast suite
(<= 5 minutes on an idle 2-core machine) checks every public function against its independent
reference once; what it leaves to the slow suite (which CI runs too: nothing is checked less) is
listed here, in three kinds, with the measured seconds that moved them (idle 2-core machine,
2026-12-05, XLA backend optimization level 0, empty persistent cache).

- `FRESH_PROCESS`: tests that start a new Python (and JAX): two host devices, cold imports, the
  persistent-cache settings, a load in a fresh process. The fast suite keeps one cold-start test
  (every public name loads in a fresh process).
- `SECOND_CHECKS`: a second independent check of what a fast test already checks: the same
  oracle under another transform, a second reference (finite differences beside autodiff, a
  second solver, a long flow beside the closed form), a second architecture of the same path.
  Each entry names the fast test that keeps the function checked.
- `CASES`: the other cases of a parametrized test whose cheapest case (by measured time, each
  case compiling programs of its own) runs in the fast suite; cases that share their programs
  cost nothing extra and stay.

An entry is a file, a test function (all its cases) or one case, as pytest's node id. conftest.py
marks them `slow` at collection; an entry that names nothing collected from a collected file is a
usage error, as is an entry whose file does not exist (a renamed test must be renamed here); under
pytest-xdist the workers hand the stale entries to the controller, which names them at the end
and ends the run with exit code 4. A test listed here is deselected by the default run even when
named by node id: add ``-m slow`` (or ``-m ""``) to run it.
"""

FRESH_PROCESS = [
    "tests/core/test_cold_start.py::test_names_load_on_first_use_and_float64_holds_in_either_import_order",  # 4.2 s
    "tests/core/test_cold_start.py::test_old_flat_paths_alias_the_same_module_and_keep_ntk_extract_functions",  # 2.0
    "tests/core/test_cold_start.py::test_compilation_cache_is_on_by_default",  # 2.0
    "tests/core/test_cold_start.py::test_compilation_cache_opt_out",  # 4.4 (2 cases)
    "tests/core/test_cold_start.py::test_unusable_default_cache_directory_is_skipped_silently",  # 2.4
    "tests/core/test_cold_start.py::test_user_cache_directory_is_kept",  # 2.2
    "tests/solvers/test_sweep.py::test_sharded_over_two_cpu_devices_is_identical",  # 13.6
    "tests/solvers/test_map_sweep.py::test_sharded_over_two_cpu_devices_equals_unsharded",  # 5.6
    "tests/network/test_heldout.py::test_load_in_a_fresh_process",  # 2.0 (fast: test_io's round trips)
]

SECOND_CHECKS = [
    # the oracles under jit/vmap/grad (fast: test_oracles_transforms' theorem6 grad and traced tests,
    # test_transforms' jit/vmap and grad-through-data tests, test_maps_transforms' closed map / train_w)
    "tests/theory/test_oracles_transforms_samplewise.py",  # 19.1
    "tests/solvers/test_transforms_events.py",  # 14.5 (fast: network/test_events, test_map_solver's stop event)
    "tests/theory/test_oracles_transforms.py::test_samplewise_gradient_stays_right_after_convergence",  # 10.7
    "tests/theory/test_oracles_transforms.py::test_theorem7_under_transforms",  # 4.9
    "tests/theory/test_oracles_transforms.py::test_theorem16_under_transforms",  # 3.9
    "tests/solvers/test_transforms.py::test_results_pickle_and_round_trip",  # 12.8 (fast: test_io, test_maps_transforms' pickle)
    "tests/solvers/test_transforms.py::test_grad_matches_finite_differences_and_theorem6",  # 6.7
    "tests/solvers/test_transforms.py::test_theorem6_and_ntk_under_transforms",  # 5.4
    "tests/dynamics/test_maps_transforms.py::test_jacfwd_wrt_M0_full_rank_form_M",  # 2.5
    "tests/dynamics/test_maps_transforms.py::test_vmap_closed_sgd_over_order_parameters_and_labels",  # 2.5
    "tests/dynamics/test_maps_transforms.py::test_vmap_closed_sgd_over_a_parameter_batch",  # 2.3
    "tests/dynamics/test_maps_transforms.py::test_grad_closed_sgd_against_finite_differences",  # 2.1
    "tests/dynamics/test_maps_transforms.py::test_grad_through_a_rank_deficient_initial_factor",  # 2.1
    "tests/dynamics/test_map_solver.py::test_grad_of_final_loss_wrt_M0_matches_finite_differences",  # 4.2
    # a second reference or a second architecture of a path a fast test checks
    "tests/solvers/test_stiff.py::test_powerlaw_diagonal_stiff_flow_vs_theorem6",  # 5.0 (fast: test_oracles, validate)
    "tests/solvers/test_sweep.py::test_stiff_woodbury_sweep_with_different_masks_per_member",  # 6.2 (fast: test_stiff's sweeps)
    "tests/solvers/test_sweep.py::test_factor_form_batch_of_M0_matches_solve_flow",  # 5.1 (fast: the other batch tests)
    "tests/solvers/test_solve.py::test_commuting_forms_agree_with_nondiagonal_init",  # 3.7 (fast: test_dense_flow_matches_scipy)
    "tests/solvers/test_flow_general.py::test_factored_flow_is_the_limit_of_gd",  # 2.9 (fast: test_E10_matches_wspace_gradient_flow)
    "tests/solvers/test_spec.py::test_objects_and_their_aliases_agree_bit_for_bit",  # 3.4 (fast: the spec's other tests)
    "tests/solvers/test_exact.py::test_exact_loss_path_matches_stiff_flow",  # 3.0 (fast: test_exact_matches_the_ode_flow)
    "tests/dynamics/test_sde.py::test_log_space_and_M_space_paths_agree",  # 3.2 (fast: the coefficients' Ito image)
    "tests/theory/test_ignition.py::test_sweep_gives_one_row_per_member",  # 3.6 (fast: test_batched_trajectory_gives_one_row_per_member)
    "tests/theory/test_asymptote.py::test_model_with_g_matches_a_long_flow",  # 3.9 (fast: the other long-flow tests)
    "tests/theory/test_compress.py::test_corollary3_bound_holds_on_sweep",  # 3.1 (fast: corollary3 exact when nothing is dropped)
    "tests/theory/test_compress.py::test_cli_compress",  # 2.6 (fast: the library calls it runs)
    "tests/network/test_predict.py::test_cross_entropy_prediction_follows_the_recorded_network",  # 10.3 (fast: logistic)
    "tests/network/test_predict.py::test_departure_of_a_module_with_a_cubic_term",  # 2.6 (fast: test_departure)
    "tests/network/test_deep.py::test_flax_nnx_chain_and_biases",  # 7.0 (fast: test_record's flax nnx module, the equinox chains)
    "tests/network/test_departure.py::test_the_estimate_costs_the_same_at_any_width",  # 6.2 (fast: the subsample tests)
    "tests/network/test_departure.py::test_all_neurons_in_groups_is_the_full_width_estimate",  # 5.3 (fast: subsample vs full width)
    "tests/network/test_degenerate.py::test_an_exactly_quadratic_layer_past_its_edge_is_flagged_unstable",  # 6.5
    "tests/network/test_training_description.py::test_deprecated_keywords_build_the_same_description",  # 5.3
    "tests/network/test_heldout.py::test_a_linear_term_enters_the_test_outputs_through_mu",  # 4.4
    "tests/network/test_record.py::test_optax_extra_arguments_and_multisteps",  # 3.7 (fast: the optax loop equality)
    "tests/network/test_heldout.py::test_several_outputs_with_one_hot_labels",  # 6.6 (fast: the one-output tests)
    "tests/network/test_deep.py::test_depth3_tanh_gap_shrinks_with_the_init",  # ~6 (fast: depth 2 tanh, deep linear)
    "tests/network/test_departure.py::test_a_mean_over_units_falls_back_to_the_full_width",  # 3.5
    "tests/theory/test_theorem45.py::test_theorem4_vs_flow",  # 4.0 (fast: theorem4 is theorem5 with one sample; validate)
    "tests/theory/test_theorem45.py::test_theorem5_rotated_vs_flow",  # 4.1 (fast: test_theorem5_fig4_vs_flow)
    "tests/theory/test_oracles.py::test_theorem6_rotated_basis",  # 2.5 (fast: test_theorem6_fig3; validate rotates)
    "tests/theory/test_oracles.py::test_theorem16_rotated",  # 2.0 (fast: test_theorem16_projector_data)
    "tests/theory/test_oracles_transforms.py::test_theorem7_traced_singular_M0",  # 3.0 (fast: test_theorem7_singular_M0)
    "tests/dynamics/test_sde.py::test_ensemble_is_vmapped_single_paths_and_ito_solver",  # 5.4 (fast: one-step moments)
    "tests/dynamics/test_maps.py::test_per_step_values_under_grad_and_vmap",  # 3.0 (fast: test_maps_transforms)
    "tests/solvers/test_sweep.py::test_stiff_sweep_with_dense_newton_defaults_to_vmap",  # 4.9 (fast: test_stiff's sweeps)
    "tests/solvers/test_exact.py::test_exact_with_basis_and_offdiagonal_init",  # 2.5 (fast: test_exact_matches_the_ode_flow)
    "tests/solvers/test_flow_general.py::test_bare_data_M_mu_form_matches_factor_form",  # 2.7 (fast: the factored flow vs scipy)
    "tests/data/test_structure.py::test_mha_blocks",  # 2.7 (fast: test_qk_attention; validate's dictionary vs autodiff)
    "tests/data/test_structure.py::test_rect_sensing",  # 1.6 (fast: test_psd_sensing)
    "tests/data/test_structure.py::test_moe",  # 1.9 (fast: data/test_moe_module; validate's MoE check)
    "tests/solvers/test_sweep.py::test_eps_sweep_matches_solve_flow",  # 4.3 (fast: the data-batch and z0 sweeps)
    "tests/solvers/test_transforms.py::test_grad_through_labels_and_data",  # 4.0 (fast: test_theorem6_grad_matches_the_flow)
    "tests/network/test_predict.py::test_frozen_output_bias_warns",  # 4.1 (fast: test_record's frozen bias)
    "tests/network/test_departure.py::test_init_gap_warns_at_the_modules_own_init",  # 7.0 (fast: test_plan's init check)
    "tests/theory/test_weight_decay.py::test_flow_solution_z_inf_and_measured_ignition_times_with_weight_decay",  # 5.0
    "tests/dynamics/test_sde.py::test_mean_field_model_one_step_moments_and_paths",  # 5.7 (fast: one-step moments)
    "tests/theory/test_oracles.py::test_theorem7_matches_theorem16",  # 2.3 (fast: both against flows; validate)
    "tests/solvers/test_solve.py::test_feedforward_factor_form_matches_dense_flow",  # 2.4 (fast: test_flow_general)
    "tests/solvers/test_stiff.py::test_block_data_stiff_solve_uses_block_newton",  # 3.1 (fast: the block solver alone)
    "tests/solvers/test_solve.py::test_ignition_times_fig3",  # 2.9 (fast: test_ignition's crossings on a GLV flow)
    "tests/theory/test_asymptote.py::test_dense_teacher_is_recovered",  # 1.4 (fast: the MLP's least squares)
    "tests/theory/test_oracles.py::test_proposition7_rotated_and_theorem6",  # 3.0 (fast: test_proposition7_offdiagonal_slaving)
    "tests/theory/test_compress.py::test_update_direction_and_jacobian_estimate",  # 2.3 (fast: the Theorem 3 tests)
    "tests/network/test_deep.py::test_named_layer_keeps_the_frozen_mode",  # 5.4 (fast: the depth 2 and 3 layouts)
    "tests/data/test_extract_structured.py::test_attention_front_rows_from_adapter_groups",  # 3.8 (fast: test_structure)
]

CASES = [
    "tests/data/test_extract.py::test_width_normalised_layer_named_or_declared[sqrt-<lambda>-0.7071]",
    "tests/data/test_extract_structured.py::test_block_zero_on_the_sample_but_not_later_is_caught[u-u probe]",
    "tests/data/test_extract_structured.py::test_chunked_equals_unchunked[auto]",
    "tests/data/test_extract_structured.py::test_row_layouts_front_back_and_the_smaller_side_first[vu-split0]",
    "tests/data/test_extract_structured.py::test_row_layouts_front_back_and_the_smaller_side_first[zvu-split2]",
    "tests/data/test_structure.py::test_qk_attention[True]",
    "tests/dynamics/test_losses.py::test_cross_entropy_map_is_w_space_gd[factor]",
    "tests/dynamics/test_map_solver.py::test_minibatch_momentum_weight_decay_agree[M-0.5-False]",
    "tests/dynamics/test_map_solver.py::test_minibatch_momentum_weight_decay_agree[factor-0.0-False]",
    "tests/dynamics/test_maps.py::test_minibatch_shared_sampling[1000]",
    "tests/dynamics/test_maps.py::test_minibatch_shared_sampling[1]",
    "tests/dynamics/test_maps.py::test_momentum[1-heavy_ball]",
    "tests/dynamics/test_maps.py::test_momentum[1-nesterov]",
    "tests/dynamics/test_maps.py::test_momentum[1000-heavy_ball]",
    "tests/dynamics/test_maps.py::test_momentum[1000-nesterov]",
    "tests/dynamics/test_maps.py::test_per_step_values_are_the_weight_space_values_at_every_step[M-huber]",
    "tests/dynamics/test_maps.py::test_per_step_values_are_the_weight_space_values_at_every_step[minibatch]",
    "tests/dynamics/test_maps.py::test_per_step_values_are_the_weight_space_values_at_every_step[momentum-decay]",
    "tests/dynamics/test_maps.py::test_per_step_values_are_the_weight_space_values_at_every_step[sgd]",
    "tests/dynamics/test_maps.py::test_structured_data[lowrank]",
    "tests/dynamics/test_maps.py::test_structured_data[other]",
    "tests/dynamics/test_maps.py::test_user_loss[1000]",
    "tests/dynamics/test_maps.py::test_user_loss[1]",
    "tests/dynamics/test_modified_flow.py::test_order_plain_flow_1_modified_flow_2[dense]",
    "tests/dynamics/test_multilayer.py::test_fig8_one_step_shares_lr_and_loss[attention]",
    "tests/dynamics/test_multilayer.py::test_theorem14_closed_vs_wspace_200_steps[widths0]",
    "tests/dynamics/test_training.py::test_per_step_rates_are_weight_space_gd_with_that_schedule[0.0-0.0-False]",
    "tests/dynamics/test_wspace_optax.py::test_optax_matches_string_optimizer[adam]",
    "tests/dynamics/test_wspace_optax.py::test_optax_matches_string_optimizer[nesterov]",
    "tests/dynamics/test_wspace_optax.py::test_optax_matches_string_optimizer[sgd]",
    "tests/network/test_compiles.py::test_a_repeated_call_compiles_nothing[plan]",
    "tests/network/test_deep.py::test_deep_linear_prediction_is_exact[3]",
    "tests/network/test_deep.py::test_deep_linear_prediction_is_exact[3, biases]",
    "tests/network/test_deep.py::test_deep_linear_prediction_is_exact[2 outputs, batches]",
    "tests/network/test_deep.py::test_autodiff_structure_equals_hand_written[2-False]",
    "tests/network/test_deep.py::test_autodiff_structure_equals_hand_written[3-True]",
    "tests/network/test_record.py::test_per_step_values_are_the_saved_values_of_every_step[minibatch]",
    "tests/network/test_record.py::test_record_equals_an_optax_loop_on_the_module[adam]",
    "tests/network/test_training_description.py::test_predict_and_record_of_one_description_agree_to_rounding[schedule-momentum-decay]",
    "tests/solvers/test_flow_general.py::test_E10_matches_scipy[feedforward]",
    "tests/solvers/test_flow_general.py::test_E10_matches_wspace_gradient_flow[0.0]",
    "tests/solvers/test_flow_general.py::test_factored_flow_matches_scipy_and_the_dense_path[2-True]",
    "tests/solvers/test_kernels.py::test_diag_gd_matches_closed_sgd[None-0.0]",
    "tests/solvers/test_solve.py::test_dense_flow_matches_scipy[M]",
    "tests/solvers/test_stiff.py::test_reduced_glv_form_matches_explicit_flow[0.0]",
    "tests/solvers/test_stiff.py::test_save_loss_equals_state_losses[M]",
    "tests/solvers/test_stiff.py::test_save_loss_equals_state_losses[factor]",
    "tests/solvers/test_stiff.py::test_stiff_sweep_uses_structured_solve_and_matches_solve_flow[diagonal-joint]",
    "tests/solvers/test_stiff.py::test_stiff_sweep_uses_structured_solve_and_matches_solve_flow[diagonal-vmap]",
    "tests/solvers/test_stiff.py::test_stiff_sweep_uses_structured_solve_and_matches_solve_flow[woodbury-vmap]",
    "tests/solvers/test_stiff.py::test_structured_stiff_glv_equals_dense_newton_and_explicit[rodas5p-dense_solver0]",
    "tests/theory/test_compress.py::test_theorem3_width_500_vs_compressed_1000_sgd_steps[matrix_completion]",
    "tests/theory/test_compress.py::test_theorem3_width_500_vs_compressed_1000_sgd_steps[mlp]",
    "tests/theory/test_samplewise_scale.py::test_structural_equals_dense[diagonal]",
    "tests/theory/test_samplewise_scale.py::test_structural_equals_dense[lowrank]",
    "tests/theory/test_sharpness.py::test_sharpness_is_the_top_eigenvalue_of_the_w_space_hessian[2]",
    "tests/theory/test_weight_decay.py::test_samplewise_oracles_weight_decay[theorem5]",
]

SLOW_CASES = FRESH_PROCESS + SECOND_CHECKS + CASES
