// Every CUDA kernel of ours waits for the kernels before it before it touches memory (CUDA.md §3,
// overlapped launches): in the PTX nvcc makes of them (the arguments: .ptx files, or one
// argument holding a ;-separated list), each kernel's first griddepcontrol.wait comes before any
// load but its parameters', any store, atomic, barrier, warp operation, call or return, with
// nothing but L2 prefetches of that kind before it, and a griddepcontrol.launch_dependents after
// it. The emulator (tests/cuda/simt) sees a thread that reaches a barrier or returns unwaited; a
// global load placed before the wait it cannot see, this can. Text order stands for the order
// of execution: the wait is each kernel's first statement, in the entry block.
//
//   test_cuda_ptx FILE.ptx...

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Kernel {
    std::string name;
    std::vector<std::string> body; // its instructions, in text order
};

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\r");
    const size_t b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

/// The kernels (.entry) of a PTX text, each with its instructions: no directives, labels,
/// comments or the braces of inline assembly's scopes.
std::vector<Kernel> kernelsOf(const std::string& ptx) {
    std::vector<Kernel> out;
    size_t at = 0;
    while ((at = ptx.find(".entry ", at)) != std::string::npos) {
        Kernel k;
        const size_t name = at + 7, paren = ptx.find('(', name);
        k.name = trim(ptx.substr(name, paren - name));
        const size_t open = ptx.find("\n{", paren);
        if (open == std::string::npos)
            break;
        size_t end = open + 2;
        for (int depth = 1; end < ptx.size() && depth > 0; ++end)
            depth += ptx[end] == '{' ? 1 : ptx[end] == '}' ? -1 : 0;
        std::istringstream lines(ptx.substr(open + 2, end - open - 3));
        for (std::string line; std::getline(lines, line);) {
            const size_t comment = line.find("//");
            line = trim(comment == std::string::npos ? line : line.substr(0, comment));
            if (line.empty() || line[0] == '.' || line == "{" || line == "}" || line.back() == ':')
                continue;
            k.body.push_back(line);
        }
        out.push_back(std::move(k));
        at = end;
    }
    return out;
}

/// The opcode of an instruction (after its predicate).
std::string opcode(const std::string& instruction) {
    std::istringstream in(instruction);
    std::string op;
    in >> op;
    if (!op.empty() && op[0] == '@')
        in >> op;
    return op;
}

bool startsWith(const std::string& s, const char* prefix) {
    return s.rfind(prefix, 0) == 0;
}

/// What may not come before the wait: what touches memory, or waits on or talks to other threads.
bool touches(const std::string& op) {
    if (startsWith(op, "ld.param") || startsWith(op, "prefetch.global.L2"))
        return false;
    for (const char* p : {"ld",       "st",
                          "atom",     "red",
                          "cp",       "bar",
                          "barrier",  "shfl",
                          "vote",     "ret",
                          "exit",     "mbarrier",
                          "membar",   "fence",
                          "tex",      "suld",
                          "sust",     "call",
                          "match",    "redux",
                          "prefetch", "griddepcontrol.launch_dependents"}) {
        const size_t n = std::string(p).size();
        if (startsWith(op, p) && (op.size() == n || op[n] == '.' || op[n] == ';'))
            return true;
    }
    return false;
}

/// What is wrong with a kernel (empty: nothing).
std::string check(const Kernel& k) {
    size_t wait = 0;
    while (wait < k.body.size() && !startsWith(opcode(k.body[wait]), "griddepcontrol.wait"))
        ++wait;
    if (wait == k.body.size())
        return "no griddepcontrol.wait";
    for (size_t i = 0; i < wait; ++i)
        if (touches(opcode(k.body[i])))
            return "'" + k.body[i] + "' before griddepcontrol.wait";
    for (size_t i = wait + 1; i < k.body.size(); ++i)
        if (startsWith(opcode(k.body[i]), "griddepcontrol.launch_dependents"))
            return {};
    return "no griddepcontrol.launch_dependents after its wait";
}

/// The checker against kernels of known verdict, so that a pass below means something.
bool selfCheck() {
    const char* ptx = R"(
.visible .entry good(
	.param .u64 good_param_0
)
{
	.reg .b64 	%rd<4>;
	ld.param.u64 	%rd1, [good_param_0];
	prefetch.global.L2 	[%rd1];
	// begin inline asm
	griddepcontrol.wait;
	// end inline asm
	griddepcontrol.launch_dependents;
	ld.global.u32 	%r1, [%rd1];
$L__BB0_2:
	ret;
}
.visible .entry loadsFirst(
	.param .u64 p
)
{
	ld.param.u64 	%rd1, [p];
	@%p1 ld.global.nc.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	griddepcontrol.wait;
	griddepcontrol.launch_dependents;
	ret;
}
.visible .entry returnsFirst(
	.param .u64 p
)
{
	@%p1 bra 	$L__BB1_2;
	ret;
$L__BB1_2:
	griddepcontrol.wait;
	griddepcontrol.launch_dependents;
	ret;
}
.visible .entry neverWaits(
	.param .u64 p
)
{
	ld.param.u64 	%rd1, [p];
	ret;
}
.visible .entry neverLets(
	.param .u64 p
)
{
	griddepcontrol.wait;
	bar.sync 	0;
	ret;
}
)";
    const std::vector<Kernel> ks = kernelsOf(ptx);
    const char* names[] = {"good", "loadsFirst", "returnsFirst", "neverWaits", "neverLets"};
    if (ks.size() != 5)
        return false;
    for (size_t i = 0; i < ks.size(); ++i)
        if (ks[i].name != names[i] || check(ks[i]).empty() != (i == 0))
            return false;
    return true;
}

} // namespace

int main(int argc, char** argv) {
    if (!selfCheck()) {
        std::fprintf(stderr, "FAIL: the checker misjudges its own cases\n");
        return 1;
    }
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        std::istringstream list(argv[i]);
        for (std::string f; std::getline(list, f, ';');)
            if (!f.empty())
                files.push_back(f);
    }
    if (files.empty()) {
        std::fprintf(stderr, "usage: test_cuda_ptx FILE.ptx...\n");
        return 2;
    }
    int kernels = 0, failed = 0;
    for (const std::string& f : files) {
        std::ifstream in(f);
        if (!in) {
            std::fprintf(stderr, "FAIL: %s: cannot be read\n", f.c_str());
            return 1;
        }
        std::stringstream text;
        text << in.rdbuf();
        for (const Kernel& k : kernelsOf(text.str())) {
            ++kernels;
            const std::string why = check(k);
            if (!why.empty()) {
                ++failed;
                std::printf("FAIL: %s: %s: %s\n", f.c_str(), k.name.c_str(), why.c_str());
            }
        }
    }
    std::printf("%d kernels in %zu PTX files: %d wait before they touch memory, %d do not\n",
                kernels, files.size(), kernels - failed, failed);
    return kernels > 0 && failed == 0 ? 0 : 1;
}
