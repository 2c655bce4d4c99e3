// The lab's CPU baseline: a plain loop over malloc'd arrays, compiled with -O2.
// extern "C" so that Python's ctypes finds the symbols by their plain names.
#include <cstdint>
#include <cstdlib>

extern "C" {

float* hpml_alloc_floats(int64_t n) {
    return static_cast<float*>(std::malloc(static_cast<size_t>(n) * sizeof(float)));
}

void hpml_free_floats(float* p) { std::free(p); }

void hpml_vector_add(const float* x, const float* y, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        out[i] = x[i] + y[i];
    }
}

}  // extern "C"
