// The host emulation of the CUDA execution model (simt.h): a block's threads as fibers of one OS
// thread, a round-robin scheduler that runs each fiber until it waits at a barrier or
// a warp intrinsic, and resolves the waits once every participant has arrived.

#include "simt.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

// --- fibers --------------------------------------------------------------------------------------
// On x86-64 a switch saves the callee-saved registers, MXCSR and the x87 control word on the
// stack it leaves and loads the other's (ucontext's swapcontext would also make a system call
// for the signal mask, at every one of the ≈ 3·10⁸ switches of the test); elsewhere, ucontext.
#if defined(__x86_64__) && defined(__linux__)
#define SIMT_SWITCH_ASM 1
extern "C" void simt_switch(void** saveSp, void* loadSp);
asm(R"(
    .pushsection .text
    .globl simt_switch
    .type simt_switch, @function
simt_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size simt_switch, .-simt_switch
    .popsection
)");
#else
#define SIMT_SWITCH_ASM 0
#endif

namespace simt {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

/// Where a fiber (or the scheduler) resumes.
struct Context {
#if SIMT_SWITCH_ASM
    void* sp = nullptr;
#else
    ucontext_t uc{};
#endif
};

void switchContext(Context& from, Context& to) {
#if SIMT_SWITCH_ASM
    simt_switch(&from.sp, to.sp);
#else
    swapcontext(&from.uc, &to.uc);
#endif
}

/// `c` starts `start` (which must never return) on the stack [stack, stack + bytes).
void startContext(Context& c, char* stack, size_t bytes, void (*start)()) {
#if SIMT_SWITCH_ASM
    // What simt_switch pops, from the lowest address: MXCSR and the x87 control word (8 bytes),
    // r15, r14, r13, r12, rbx, rbp, then the return address, `start`; above it 8 bytes, so that
    // `start` begins with rsp ≡ 8 (mod 16) as after a call.
    auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
    auto* w = reinterpret_cast<uint64_t*>(top - 8 - 8 * 8);
    uint32_t control[2] = {0, 0};
    asm volatile("stmxcsr %0" : "=m"(control[0]));
    asm volatile("fnstcw %0" : "=m"(control[1]));
    std::memcpy(&w[0], control, 8);
    for (int i = 1; i <= 6; ++i)
        w[i] = 0;
    w[7] = reinterpret_cast<uint64_t>(start);
    c.sp = w;
#else
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, start, 0);
#endif
}

enum class State { Ready, AtBarrier, AtWarp, Done };

struct Fiber {
    uint3 idx{};
    int linear = 0;
    Context ctx;
    State state = State::Ready;
    // the warp intrinsic it waits at
    WarpOp op = WarpOp::Idx;
    unsigned mask = 0;
    uint64_t value = 0, result = 0;
    int arg = 0, width = 32;
    size_t sharedNext = 0;    // the shared arrays it has declared in this block
    bool waitedPrior = false; // SPARQLAB_WAIT_FOR_PRIOR() called
    // Its copies to shared memory not waited for yet (SPARQLAB_COPY_ASYNC_16): where each goes
    // and the bytes it read.
    struct Copy {
        unsigned char* dst;
        unsigned char bytes[16];
    };
    std::vector<Copy> copies;
};

struct Block {
    uint3 idx{};
    dim3 dim, grid;
    std::vector<Fiber> fibers;
    std::vector<unsigned char> shared; // dynamic shared memory
    // The shared arrays (SPARQLAB_SHARED) of this block: where each lies in `statics` and its size.
    std::vector<unsigned char> statics;
    std::vector<std::pair<size_t, size_t>> slots;
    size_t staticUsed = 0;
    Context scheduler;
    const std::function<void()>* body = nullptr;
    bool after = false; // launched with SPARQLAB_LAUNCH_AFTER
};

struct Stacks {
    char* base = nullptr;
    size_t count = 0;
    char* at(size_t i) {
        if (i >= count) {
            if (base)
                munmap(base, count * kStackBytes);
            count = std::max<size_t>(i + 1, 1024);
            void* p = mmap(nullptr, count * kStackBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED)
                throw std::runtime_error("simt: cannot map the fibers' stacks");
            base = static_cast<char*>(p);
            // The lowest page of each stack (they grow down) faults: an overflow stops there
            // instead of running into the next fiber's stack.
            for (size_t s = 0; s < count; ++s)
                mprotect(base + s * kStackBytes, 4096, PROT_NONE);
        }
        return base + i * kStackBytes;
    }
};

Block* g_block = nullptr;
Fiber* g_fiber = nullptr;
Stacks g_stacks;
Counters g_counters;
/// SIMT_SMS: the multiprocessors of the emulated device (default 4).
int g_sms = [] {
    const char* e = std::getenv("SIMT_SMS");
    const int n = e ? std::atoi(e) : 4;
    return n >= 1 && n <= 1024 ? n : 4;
}();

/// The order in which a pass of the scheduler runs the ready fibers: a fresh permutation each
/// pass (xorshift, seeded by SIMT_SEED, default 1), so that the kernels meet many interleavings
/// of their threads between two waits — as a GPU's independent thread scheduling may run them —
/// rather than always thread 0 first. SIMT_SEED=0 keeps the plain order.
struct Order {
    uint64_t state = 0;
    std::vector<uint32_t> perm;
    Order() {
        const char* e = std::getenv("SIMT_SEED");
        state = e ? std::strtoull(e, nullptr, 10) : 1;
    }
    const std::vector<uint32_t>& next(size_t n) {
        if (perm.size() != n) {
            perm.resize(n);
            for (size_t i = 0; i < n; ++i)
                perm[i] = static_cast<uint32_t>(i);
        }
        if (state == 0)
            return perm;
        for (size_t i = n; i > 1; --i) { // Fisher–Yates
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            std::swap(perm[i - 1], perm[state % i]);
        }
        return perm;
    }
};
Order g_order, g_blockOrder;
/// The dynamic shared memory limit cudaFuncSetAttribute set for each kernel.
std::map<const void*, int> g_maxDynamic;
constexpr size_t kSharedMax = 227 * 1024;
const uint3 kZero3{};
const dim3 kOne3(1, 1, 1);

[[noreturn]] void programmingError(const std::string& what) {
    std::fprintf(stderr, "simt: CUDA programming error: %s\n", what.c_str());
    std::abort();
}

/// A thread of a kernel launched after another that reaches `what` before it waited for that one:
/// on a GPU it could read what the kernel before has not written yet.
void requireWaited(const char* what);
std::string where(const Fiber& f);

[[noreturn]] void entry() {
    (*g_block->body)();
    requireWaited("returns");
    if (!g_fiber->copies.empty())
        programmingError(where(*g_fiber) + " returns with asynchronous copies to shared memory "
                                           "it has not waited for");
    g_fiber->state = State::Done;
    switchContext(g_fiber->ctx, g_block->scheduler); // never resumed
    std::abort();
}

Fiber& self() {
    if (!g_fiber)
        programmingError("a device intrinsic called outside a kernel");
    return *g_fiber;
}

void yield() {
    Fiber& f = self();
    ++g_counters.switches;
    switchContext(f.ctx, g_block->scheduler);
}

std::string where(const Fiber& f) {
    return "block (" + std::to_string(g_block->idx.x) + "," + std::to_string(g_block->idx.y) + "," +
           std::to_string(g_block->idx.z) + ") thread " + std::to_string(f.linear);
}

/// The lane `f` reads in a shuffle, or −1 for its own value.
int source(const Fiber& f, int lane) {
    const int w = f.width, seg = lane & ~(w - 1), inSeg = lane & (w - 1);
    const int arg = f.arg & 31; // (the hardware reads the low 5 bits)
    switch (f.op) {
    case WarpOp::Idx:
        return seg + (arg & (w - 1));
    case WarpOp::Up:
        return inSeg - arg >= 0 ? lane - arg : -1;
    case WarpOp::Down:
        return inSeg + arg < w ? lane + arg : -1;
    case WarpOp::Xor: {
        const int s = lane ^ arg;
        return s < seg + w ? s : -1;
    }
    default:
        return -1;
    }
}

/// Releases the lanes of warp `w` waiting at an intrinsic whose mask has all arrived; true when
/// some were released.
bool resolveWarp(Block& b, size_t first, size_t end) {
    bool released = false;
    for (size_t i = first; i < end; ++i) {
        Fiber& f = b.fibers[i];
        if (f.state != State::AtWarp)
            continue;
        const unsigned mask = f.mask;
        bool all = true;
        for (size_t j = first; j < end; ++j) {
            const int lane = static_cast<int>(j - first);
            if (!(mask >> lane & 1u))
                continue;
            const Fiber& o = b.fibers[j];
            if (o.state == State::Done)
                programmingError(where(f) + ": a warp intrinsic's mask names lane " +
                                 std::to_string(lane) + ", which has returned");
            if (o.state != State::AtWarp) {
                all = false;
                continue;
            }
            if (o.mask != mask || o.op != f.op || o.width != f.width)
                programmingError(where(f) + " and " + where(o) +
                                 ": lanes of one mask wait at different warp intrinsics");
        }
        if (!all)
            continue;
        // Every lane of the mask has arrived: compute each one's result.
        unsigned ballot = 0;
        for (size_t j = first; j < end; ++j)
            if (mask >> (j - first) & 1u)
                ballot |= (b.fibers[j].value ? 1u : 0u) << (j - first);
        for (size_t j = first; j < end; ++j) {
            const int lane = static_cast<int>(j - first);
            if (!(mask >> lane & 1u))
                continue;
            Fiber& o = b.fibers[j];
            switch (o.op) {
            case WarpOp::Ballot:
                o.result = ballot;
                break;
            case WarpOp::MatchAny: {
                unsigned same = 0;
                for (size_t m = first; m < end; ++m)
                    if ((mask >> (m - first) & 1u) && b.fibers[m].value == o.value)
                        same |= 1u << (m - first);
                o.result = same;
                break;
            }
            default: {
                const int s = source(o, lane);
                if (s >= 0 && !(mask >> s & 1u))
                    programmingError(where(o) + ": a shuffle reads lane " + std::to_string(s) +
                                     ", which is not in its mask");
                o.result = s < 0 ? o.value : b.fibers[first + static_cast<size_t>(s)].value;
            }
            }
        }
        for (size_t j = first; j < end; ++j)
            if (mask >> (j - first) & 1u)
                b.fibers[j].state = State::Ready;
        released = true;
    }
    return released;
}

/// Runs `f` until it waits or returns (a function of its own: the context switch returns twice).
__attribute__((noinline)) void resume(Block& b, Fiber& f) {
    g_fiber = &f;
    ++g_counters.switches;
    switchContext(b.scheduler, f.ctx);
    g_fiber = nullptr;
}

void runBlock(Block& b) {
    const size_t n = b.fibers.size();
    for (size_t i = 0; i < n; ++i) {
        Fiber& f = b.fibers[i];
        f.state = State::Ready;
        f.sharedNext = 0;
        f.waitedPrior = false;
        startContext(f.ctx, g_stacks.at(i), kStackBytes, entry);
    }
    std::fill(b.shared.begin(), b.shared.end(), 0xFF);
    b.slots.clear();
    b.staticUsed = 0;
    for (;;) {
        size_t done = 0, atBarrier = 0;
        for (const uint32_t i : g_order.next(n)) {
            Fiber& f = b.fibers[i];
            if (f.state == State::Ready)
                resume(b, f);
            done += f.state == State::Done;
            atBarrier += f.state == State::AtBarrier;
        }
        if (done == n)
            return;
        bool released = false;
        for (size_t w = 0; w < n; w += 32)
            released = resolveWarp(b, w, std::min(n, w + 32)) || released;
        if (!released && atBarrier > 0 && atBarrier + done == n) {
            for (Fiber& f : b.fibers)
                if (f.state == State::AtBarrier)
                    f.state = State::Ready;
            released = true;
        }
        if (!released) {
            std::string states;
            for (size_t i = 0; i < n && i < 64; ++i)
                states += b.fibers[i].state == State::AtBarrier ? 'B'
                          : b.fibers[i].state == State::AtWarp  ? 'W'
                          : b.fibers[i].state == State::Done    ? '.'
                                                                : 'R';
            programmingError("block (" + std::to_string(b.idx.x) + "," + std::to_string(b.idx.y) +
                             "," + std::to_string(b.idx.z) +
                             ") can never go on: threads wait at __syncthreads while others "
                             "returned or wait at a warp intrinsic (threads 0..63: " +
                             states + ")");
        }
    }
}

void requireWaited(const char* what) {
    Fiber& f = self();
    if (g_block->after && !f.waitedPrior)
        programmingError(where(f) + " of a kernel launched with SPARQLAB_LAUNCH_AFTER " + what +
                         " before SPARQLAB_WAIT_FOR_PRIOR()");
}

} // namespace

const uint3& threadIndex() {
    return self().idx;
}
const uint3& blockIndex() {
    return g_block ? g_block->idx : kZero3;
}
const dim3& blockDimension() {
    return g_block ? g_block->dim : kOne3;
}
const dim3& gridDimension() {
    return g_block ? g_block->grid : kOne3;
}
void* staticShared(size_t bytes, size_t align) {
    Fiber& f = self();
    Block& b = *g_block;
    const size_t k = f.sharedNext++;
    if (k < b.slots.size()) {
        if (b.slots[k].second != bytes)
            programmingError(where(f) + ": threads of one block declare their shared arrays in "
                                        "different orders");
        return b.statics.data() + b.slots[k].first;
    }
    if (k > b.slots.size())
        programmingError(where(f) + ": a shared array declared out of turn");
    const size_t at = (b.staticUsed + align - 1) / align * align;
    if (at + bytes + b.shared.size() > kSharedMax)
        programmingError(where(f) + ": more than 227 KiB of shared memory, static and dynamic");
    std::memset(b.statics.data() + at, 0xFF, bytes);
    b.slots.emplace_back(at, bytes);
    b.staticUsed = at + bytes;
    return b.statics.data() + at;
}

cudaError_t setMaxDynamicShared(const void* kernel, int attribute, int value) {
    if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || static_cast<size_t>(value) > kSharedMax)
            return cudaErrorInvalidValue;
        g_maxDynamic[kernel] = value;
    }
    return cudaSuccess;
}

void* dynamicShared() {
    return g_block && !g_block->shared.empty() ? g_block->shared.data() : nullptr;
}

void waitForPrior() {
    self().waitedPrior = true;
}

void copyAsync16(void* dst, const void* src, int bytes) {
    requireWaited("starts a copy from global memory");
    Fiber& f = self();
    if (bytes < 0 || bytes > 16 || bytes % 4 != 0)
        programmingError(where(f) + ": an asynchronous copy of 16 bytes that reads " +
                         std::to_string(bytes) + " of them (0, 4, 8, 12 or 16)");
    const auto d = reinterpret_cast<uintptr_t>(dst), g = reinterpret_cast<uintptr_t>(src);
    if (d % 16 != 0 || g % 16 != 0)
        programmingError(where(f) + ": an asynchronous copy of 16 bytes from or to an address "
                                    "that is not a multiple of 16");
    auto inside = [d](const std::vector<unsigned char>& m) {
        const auto at = reinterpret_cast<uintptr_t>(m.data());
        return d >= at && d + 16 <= at + m.size();
    };
    if (!inside(g_block->shared) && !inside(g_block->statics))
        programmingError(where(f) + ": an asynchronous copy to memory that is not the block's "
                                    "shared memory");
    Fiber::Copy c;
    c.dst = static_cast<unsigned char*>(dst);
    std::memset(c.bytes, 0, 16);
    std::memcpy(c.bytes, src, static_cast<size_t>(bytes));
    std::memset(dst, 0xFF, 16); // (undefined from the issue to the wait: poisoned)
    f.copies.push_back(c);
}

void notePath(const char* path) {
    ++g_counters.paths[path];
}

void copyAsyncWaitAll() {
    Fiber& f = self();
    for (const Fiber::Copy& c : f.copies)
        std::memcpy(c.dst, c.bytes, 16);
    f.copies.clear();
}

void syncThreads() {
    requireWaited("reaches a barrier");
    self().state = State::AtBarrier;
    yield();
}

uint64_t warp(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
    requireWaited("reaches a warp intrinsic");
    Fiber& f = self();
    const int lane = f.linear & 31;
    if (!(mask >> lane & 1u))
        programmingError(where(f) + ": a warp intrinsic's mask leaves out the calling lane");
    if (width < 1 || width > 32 || (width & (width - 1)) != 0)
        programmingError(where(f) + ": a shuffle width that is not a power of two up to 32");
    const size_t inWarp = std::min<size_t>(32, g_block->fibers.size() - (f.linear & ~31));
    if (inWarp < 32 && (mask >> inWarp) != 0)
        programmingError(where(f) + ": a warp intrinsic's mask names lanes past the block's last "
                                    "thread");
    f.op = op;
    f.mask = mask;
    f.value = value;
    f.arg = arg;
    f.width = width;
    f.state = State::AtWarp;
    yield();
    return f.result;
}

const Counters& counters() {
    return g_counters;
}

void run(dim3 grid, dim3 block, size_t sharedBytes, const void* kernel,
         const std::function<void()>& body, bool after) {
    if (g_block)
        programmingError("a kernel launched from a kernel");
    // What a GPU refuses at the launch (cudaErrorInvalidConfiguration and the like).
    const size_t threads = static_cast<size_t>(block.x) * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64)
        throw std::runtime_error("simt: a block of " + std::to_string(threads) + " threads");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
        throw std::runtime_error("simt: a grid of (" + std::to_string(grid.x) + ", " +
                                 std::to_string(grid.y) + ", " + std::to_string(grid.z) +
                                 ") blocks (y and z at most 65,535)");
    if (sharedBytes > kSharedMax)
        throw std::runtime_error("simt: " + std::to_string(sharedBytes) +
                                 " bytes of dynamic shared memory (the H100/H200 allow 227 KiB)");
    if (sharedBytes > 48 * 1024) {
        const auto it = g_maxDynamic.find(kernel);
        if (it == g_maxDynamic.end() || static_cast<size_t>(it->second) < sharedBytes)
            throw std::runtime_error(
                "simt: " + std::to_string(sharedBytes) +
                " bytes of dynamic shared memory without cudaFuncSetAttribute raising the "
                "kernel's limit past 48 KiB");
    }
    ++g_counters.launches;
    Block b;
    b.dim = block;
    b.grid = grid;
    b.body = &body;
    b.after = after;
    b.shared.resize(sharedBytes);
    b.statics.resize(kSharedMax);
    b.fibers.resize(threads);
    for (size_t i = 0; i < threads; ++i) {
        Fiber& f = b.fibers[i];
        f.linear = static_cast<int>(i);
        f.idx.x = static_cast<unsigned>(i % block.x);
        f.idx.y = static_cast<unsigned>(i / block.x % block.y);
        f.idx.z = static_cast<unsigned>(i / (block.x * block.y));
    }
    g_block = &b;
    try {
        // The blocks one after another, in an order drawn as the threads' is (SIMT_SEED): a GPU
        // runs them in any order, and nothing may depend on it.
        const size_t n = static_cast<size_t>(grid.x) * grid.y * grid.z;
        for (const uint32_t i : g_blockOrder.next(n)) {
            b.idx =
                uint3{static_cast<unsigned>(i % grid.x), static_cast<unsigned>(i / grid.x % grid.y),
                      static_cast<unsigned>(i / (static_cast<size_t>(grid.x) * grid.y))};
            ++g_counters.blocks;
            runBlock(b);
        }
    } catch (...) {
        g_block = nullptr;
        throw;
    }
    g_block = nullptr;
}

cudaError_t deviceAttribute(int* value, cudaDeviceAttr attr, int) {
    switch (attr) {
    case cudaDevAttrMultiProcessorCount:
        *value = g_sms;
        break;
    case cudaDevAttrL2CacheSize:
        *value = 50 << 20;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *value = 227 * 1024;
        break;
    default:
        *value = 0;
    }
    return cudaSuccess;
}

cudaError_t occupancy(int* blocks) {
    *blocks = 2;
    return cudaSuccess;
}

const char* errorString(cudaError_t) {
    return "an error of the emulated device";
}

} // namespace simt
