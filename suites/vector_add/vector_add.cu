// Lab 003, problem 3, parts 2 and 3, as CUDA C++: c = a + b on the GPU, with explicit memory
// (cudaMalloc + cudaMemcpy) or unified memory (cudaMallocManaged), in the three launch
// configurations of the handout:
//     (a) one block of one thread          <<<1, 1>>>
//     (b) one block of 256 threads         <<<1, 256>>>
//     (c) ceil(N / 256) blocks of 256      <<<(N + 255) / 256, 256>>>
// One grid-stride kernel serves all three: with fewer threads than elements each thread loops.
//
// Built as a shared library for ctypes (the tests pass their host arrays in and check the sum
// that comes back, bit for bit); with -DVECTOR_ADD_MAIN it is the handout's standalone program:
//     vector_add K explicit|unified a|b|c     -> prints the time to execute the program
// Every CUDA call is checked: the first error is returned (its code), never ignored.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace {

constexpr int kThreadsPerBlock = 256;

__global__ void add_kernel(int64_t n, const float* x, const float* y, float* out) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        out[i] = x[i] + y[i];
    }
}

// Blocks and threads of configuration 'a', 'b' or 'c'; false for any other letter.
bool launch_shape(char config, int64_t n, unsigned* blocks, unsigned* threads) {
    switch (config) {
        case 'a': *blocks = 1; *threads = 1; return true;
        case 'b': *blocks = 1; *threads = kThreadsPerBlock; return true;
        case 'c':
            *blocks = static_cast<unsigned>((n + kThreadsPerBlock - 1) / kThreadsPerBlock);
            *threads = kThreadsPerBlock;
            return *blocks > 0;
        default: return false;
    }
}

// Records the first failing call of a program; later calls still run (frees must happen).
struct Status {
    cudaError_t first = cudaSuccess;
    void check(cudaError_t code) {
        if (first == cudaSuccess && code != cudaSuccess) first = code;
    }
};

}  // namespace

extern "C" {

// out = x + y for n floats of host memory, through GPU memory of the chosen kind. Returns 0,
// a cudaError_t code, or -1 for an unknown configuration. `poison` fills the GPU's output with
// NaN before the kernel, so an element the kernel skipped cannot pass a bit-exact check.
int vector_add_program(const float* x, const float* y, float* out, int64_t n, int managed,
                       char config, int poison) {
    unsigned blocks = 0, threads = 0;
    if (n < 1 || !launch_shape(config, n, &blocks, &threads)) return -1;
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    float *dx = nullptr, *dy = nullptr, *dout = nullptr;
    Status status;
    if (managed) {
        status.check(cudaMallocManaged(&dx, bytes));
        status.check(cudaMallocManaged(&dy, bytes));
        status.check(cudaMallocManaged(&dout, bytes));
        if (status.first == cudaSuccess) {
            // The CPU writes the inputs in place; the driver moves the pages on demand.
            std::memcpy(dx, x, bytes);
            std::memcpy(dy, y, bytes);
            if (poison) std::memset(dout, 0xFF, bytes);  // all bits set: a NaN
        }
    } else {
        status.check(cudaMalloc(&dx, bytes));
        status.check(cudaMalloc(&dy, bytes));
        status.check(cudaMalloc(&dout, bytes));
        status.check(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
        status.check(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
        if (poison) status.check(cudaMemset(dout, 0xFF, bytes));
    }
    if (status.first == cudaSuccess) {
        add_kernel<<<blocks, threads>>>(n, dx, dy, dout);
        status.check(cudaGetLastError());  // a launch error
        status.check(cudaDeviceSynchronize());  // an error while the kernel ran
    }
    if (status.first == cudaSuccess) {
        if (managed) {
            std::memcpy(out, dout, bytes);  // the CPU reads the sum: pages come back
        } else {
            status.check(cudaMemcpy(out, dout, bytes, cudaMemcpyDeviceToHost));
        }
    }
    // cudaFree(nullptr) is a no-op: whatever was allocated is freed, on every path.
    status.check(cudaFree(dx));
    status.check(cudaFree(dy));
    status.check(cudaFree(dout));
    return static_cast<int>(status.first);
}

const char* vector_add_error_string(int code) {
    if (code == -1) return "unknown launch configuration (use a, b or c) or n < 1";
    return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // extern "C"

#ifdef VECTOR_ADD_MAIN
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s K explicit|unified a|b|c  (K: million elements)\n",
                     argv[0]);
        return 2;
    }
    const int64_t n = static_cast<int64_t>(std::atof(argv[1]) * 1e6);
    const int managed = std::strcmp(argv[2], "unified") == 0;
    std::vector<float> x(n), y(n), out(n);
    for (int64_t i = 0; i < n; ++i) {
        x[i] = 1.0f;
        y[i] = 2.0f;
    }
    const auto start = std::chrono::steady_clock::now();
    const int code = vector_add_program(x.data(), y.data(), out.data(), n, managed, argv[3][0], 0);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (code != 0) {
        std::fprintf(stderr, "error: %s\n", vector_add_error_string(code));
        return 1;
    }
    for (int64_t i = 0; i < n; ++i) {
        if (out[i] != 3.0f) {
            std::fprintf(stderr, "wrong sum at %lld: %f\n", static_cast<long long>(i), out[i]);
            return 1;
        }
    }
    std::printf("K=%s %s (%c): %.6f s\n", argv[1], argv[2], argv[3][0], seconds);
    return 0;
}
#endif
