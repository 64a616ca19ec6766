// pk_cuda_host.h: compile portkern's CUDA C (kernels/cuda/*.cu) as ordinary host C++ and run a
// kernel by looping over its launch grid. A correctness harness for the cuda_host backend
// (portkern/backends/cuda_host.py), never a timed target.
//
// What it maps: the qualifiers (__global__, __device__, __forceinline__, __launch_bounds__,
// __shared__; __restrict__ is a GNU C++ keyword already), the built-in indices (blockIdx,
// threadIdx, blockDim, gridDim), the intrinsics the kernels use (__umulhi, __ldg, __float_as_uint,
// __syncthreads)
// and CUDA's math functions, whose float and double overloads come from <cmath> (host libm, not
// CUDA's math library: results may differ in the last ulp, as on OpenCL devices; sincos is the host's
// sin and cos).
//
// How a launch runs: blocks one after another, and within a block thread 0 first, as a coroutine.
// If it finishes without reaching __syncthreads(), the block has no barrier and its other threads
// run as plain calls. If it stops at a barrier, every thread of the block runs as a coroutine and
// the block advances phase by phase: each thread runs until its next barrier, in threadIdx order,
// then the next phase starts; __shared__ variables are statics, so a block's threads share them.
// A barrier reached by some threads of a block but not all is an error (CUDA leaves it undefined).
// Threads of a phase run in threadIdx order, or in reverse with -DPK_HOST_REVERSE_PHASES: a kernel
// free of races inside a phase gives the same bits both ways (the harness's tests compare them).
// Limits: no warp semantics (no __shfl*, __ballot*, warp-synchronous code); no atomics; a race is
// found only where the two orders differ; one launch at a time.
#ifndef PK_CUDA_HOST_H
#define PK_CUDA_HOST_H

#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)
#define _XOPEN_SOURCE 600  // macOS declares the (deprecated, still working) ucontext calls only with this
#endif
#include <ucontext.h>
#include <sys/mman.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <utility>

// ---- qualifiers ----------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // one block at a time: a static is the block's shared memory

// ---- math: CUDA's device overloads are <cmath>'s (sin(float) is sinf, as in CUDA C++) ------------
using std::copysign;
using std::cos;
using std::exp;
using std::fabs;
using std::fmax;
using std::fmin;
using std::fmod;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::log;
using std::sin;
using std::sqrt;
using std::tanh;
// sincos (CUDA's float overload too) and sincosf: the host's sin and cos. Macros, because glibc declares
// its own sincos and sincosf as C functions.
static inline void pk_host_sincos(float x, float *s, float *c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
static inline void pk_host_sincos(double x, double *s, double *c) {
    *s = std::sin(x);
    *c = std::cos(x);
}
#define sincos pk_host_sincos
#define sincosf pk_host_sincos

// ---- built-in indices ----------------------------------------------------------------------------
struct pk_host_dim3 {
    unsigned int x, y, z;
};
static pk_host_dim3 blockIdx, threadIdx, blockDim, gridDim;

// ---- intrinsics -----------------------------------------------------------------------------------
static inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return (unsigned int)(((unsigned long long)a * (unsigned long long)b) >> 32);
}
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline unsigned int __float_as_uint(float x) {
    unsigned int u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

// ---- the scheduler --------------------------------------------------------------------------------
namespace pk_host {

enum State { RUNNING, AT_BARRIER, DONE };
constexpr size_t STACK = 256 * 1024;  // per thread of a block in barrier mode; a guard page below
constexpr int MAX_THREADS = 1024;     // CUDA's limit on threads per block

struct Fiber {
    ucontext_t ctx;
    char *stack = nullptr;  // mmap'd, lowest page PROT_NONE
    State state = DONE;
    unsigned int idx = 0;  // linear thread index in the block
};

static Fiber fibers[MAX_THREADS];
static ucontext_t scheduler;
static int current = -1;  // fiber running now; -1 while threads run as plain calls
static void (*body)(void *) = nullptr;
static void *body_ctx = nullptr;
static char error[512];

static void set_thread(unsigned int t) {
    threadIdx.x = t % blockDim.x;
    threadIdx.y = t / blockDim.x % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

static void fiber_main() {
    body(body_ctx);
    fibers[current].state = DONE;  // returning resumes uc_link, the scheduler
}

static bool start(int f, unsigned int t) {
    Fiber &fb = fibers[f];
    if (fb.stack == nullptr) {
        void *mem = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) {
            std::snprintf(error, sizeof error, "cuda_host: cannot map a %zu-byte stack for thread %u", STACK, t);
            return false;
        }
        mprotect(mem, 4096, PROT_NONE);  // a stack overflow faults instead of corrupting a neighbour
        fb.stack = static_cast<char *>(mem);
    }
    getcontext(&fb.ctx);
    fb.ctx.uc_stack.ss_sp = fb.stack;
    fb.ctx.uc_stack.ss_size = STACK;
    fb.ctx.uc_link = &scheduler;
    makecontext(&fb.ctx, fiber_main, 0);
    fb.state = RUNNING;
    fb.idx = t;
    return true;
}

static void resume(int f) {
    current = f;
    set_thread(fibers[f].idx);
    fibers[f].state = RUNNING;
    swapcontext(&scheduler, &fibers[f].ctx);
    current = -1;
}

static bool block_error(const char *what, int reached, int threads) {
    std::snprintf(error, sizeof error,
                  "cuda_host: __syncthreads() %s in block (%u, %u, %u): %d of its %d threads reached it "
                  "(a barrier every thread of a block must reach; undefined behaviour on a GPU)",
                  what, blockIdx.x, blockIdx.y, blockIdx.z, reached, threads);
    return false;
}

// One block: thread 0 as a coroutine; the rest as plain calls, or all phase by phase after a barrier.
static bool run_block(int threads) {
    if (!start(0, 0)) return false;
    resume(0);
    if (fibers[0].state == DONE) {
        for (int t = 1; t < threads; ++t) {
            set_thread((unsigned int)t);
            body(body_ctx);
            if (error[0]) return false;  // a barrier reached in a block whose thread 0 never did
        }
        return true;
    }
    for (int i = 1; i < threads; ++i) {
#ifdef PK_HOST_REVERSE_PHASES
        const int t = threads - i;
#else
        const int t = i;
#endif
        if (!start(t, (unsigned int)t)) return false;
        resume(t);
    }
    for (;;) {
        int waiting = 0;
        for (int t = 0; t < threads; ++t) waiting += fibers[t].state == AT_BARRIER;
        if (waiting == 0) return true;
        if (waiting != threads) return block_error("divergence", waiting, threads);
#ifdef PK_HOST_REVERSE_PHASES  // a race check: a kernel without races gives the same bits in either order
        for (int t = threads - 1; t >= 0; --t) resume(t);
#else
        for (int t = 0; t < threads; ++t) resume(t);
#endif
    }
}

template <class T> constexpr char kind() {
    if constexpr (std::is_pointer_v<T>) return 'p';
    else if constexpr (std::is_floating_point_v<T>) return 'f';
    else if constexpr (std::is_class_v<T>) return 's';
    else if constexpr (std::is_void_v<T>) return 'v';
    else if constexpr (std::is_signed_v<T>) return 'i';
    else return 'u';
}
template <class T> constexpr unsigned int size() {
    if constexpr (std::is_void_v<T>) return 0u;
    else return (unsigned int)sizeof(T);
}

// A kernel's signature for the Python side's argument check: per parameter, its kind and size and,
// for a pointer, the kind and size of what it points to. kinds/sizes hold 2 entries per parameter.
template <class... A> static int signature(void (*)(A...), char *kinds, unsigned int *sizes, int cap) {
    constexpr int n = (int)sizeof...(A);
    if (n * 2 <= cap) {
        int k = 0;
        ((kinds[k] = kind<A>(), sizes[k] = size<A>(),
          kinds[k + 1] = kind<std::remove_cv_t<std::remove_pointer_t<A>>>(),
          sizes[k + 1] = std::is_pointer_v<A> ? size<std::remove_cv_t<std::remove_pointer_t<A>>>() : 0u, k += 2),
         ...);
    }
    return n;
}

template <class... A, size_t... I> static void call(void (*k)(A...), void *const *args, std::index_sequence<I...>) {
    k(*static_cast<A *>(args[I])...);
}

template <class... A> struct Launch {
    void (*kernel)(A...);
    void *const *args;
    static void run(void *self) {
        auto *l = static_cast<Launch *>(self);
        call(l->kernel, l->args, std::index_sequence_for<A...>{});
    }
};

// kernel<<<grid, block>>>(*args[0], *args[1], ...): args[i] points at the value of parameter i.
// Returns 0, or -1 with the reason in pk_host_error().
template <class... A>
static int launch(void (*kernel)(A...), const unsigned int *grid, const unsigned int *block, void *const *args) {
    error[0] = '\0';
    const long long threads = (long long)block[0] * block[1] * block[2];
    if (threads < 1 || threads > MAX_THREADS || grid[0] < 1 || grid[1] < 1 || grid[2] < 1) {
        std::snprintf(error, sizeof error, "cuda_host: invalid launch: grid (%u, %u, %u), block (%u, %u, %u)",
                      grid[0], grid[1], grid[2], block[0], block[1], block[2]);
        return -1;
    }
    static Launch<A...> l;  // static: the scheduler's globals point at it while the launch runs
    l = {kernel, args};
    body = &Launch<A...>::run;
    body_ctx = &l;
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    for (unsigned int z = 0; z < grid[2]; ++z)
        for (unsigned int y = 0; y < grid[1]; ++y)
            for (unsigned int x = 0; x < grid[0]; ++x) {
                blockIdx = {x, y, z};
                if (!run_block((int)threads)) return -1;
            }
    return 0;
}

}  // namespace pk_host

static inline void __syncthreads() {
    using namespace pk_host;
    if (current < 0) {  // threads running as plain calls: thread 0 of this block passed no barrier
        if (!error[0])
            std::snprintf(error, sizeof error,
                          "cuda_host: __syncthreads() divergence in block (%u, %u, %u): thread %u reached a "
                          "barrier that thread 0 did not (undefined behaviour on a GPU)",
                          blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
        return;
    }
    Fiber &fb = fibers[current];
    fb.state = AT_BARRIER;
    swapcontext(&fb.ctx, &scheduler);
}

extern "C" const char *pk_host_error() { return pk_host::error; }

// The exports of one kernel, written after the kernel source by the harness, one line per kernel.
#define PK_HOST_EXPORT(k)                                                                             \
    extern "C" int pk_host_launch_##k(const unsigned int *grid, const unsigned int *block, void *const *args) { \
        return pk_host::launch(k, grid, block, args);                                                 \
    }                                                                                                 \
    extern "C" int pk_host_signature_##k(char *kinds, unsigned int *sizes, int cap) {                  \
        return pk_host::signature(k, kinds, sizes, cap);                                              \
    }

#endif  // PK_CUDA_HOST_H
