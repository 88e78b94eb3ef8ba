"""The lowerings of `tracecache.torch.lowering`, one module per op family. Importing this package
registers every lowering in `lowering.LOWERINGS`; each module adds its ops with `@lowers`."""

from . import (conv_norm, elementwise, indexing, layout, matmul, nn, random_ops, reductions, resize,  # noqa: F401
               sources, strided, volumetric)
