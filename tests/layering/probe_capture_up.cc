// Compiled with only the capture layer's include directories by ctest `layering.fence_refuses`,
// which expects the compile to FAIL: capture may not include a runtime header. If this ever
// compiles, the include fence in cmake/layers.cmake is broken.
#include "replay/engine/runtime.h"
