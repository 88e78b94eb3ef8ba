// Compiled with only the capture layer's include directories by ctest `layering.fence_allows`:
// a capture file may include capture headers.
#include "capture/trace/tensor.h"
