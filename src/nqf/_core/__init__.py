"""Infrastructure every layer of nqf uses (layer 0; private): the float64 policy (`_config`),
argument checks (`_checks`), the error of a failed assumption (`_errors`), memory estimates
before allocation (`memory`, public as `nqf.memory`), saving and loading results (`io`, public
as `nqf.io`), JAX's persistent compilation cache (`_cache`) and the version.

May import nothing of nqf's other layers.
"""
