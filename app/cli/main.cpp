// sparqlab-cli: the command line of SparQ Lab (CONTRACTS.md §2).

#include "args.h"
#include "command_help.h"
#include "commands.h"

#include "attention/method_table.h"
#include "attention/runtime_info.h"

#include "sparqlab/version.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using sparqlab::cli::Command;

void printUsage(std::FILE* to) {
    std::fprintf(to, "usage: sparqlab-cli <subcommand> [options]\n"
                     "       sparqlab-cli --version | --help [--all]\n\n"
                     "subcommands (each has --help):\n");
    for (const Command& c : sparqlab::cli::commands())
        std::fprintf(to, "  %-11s %s%s\n", c.name, c.summary, c.run ? "" : " [not yet available]");
    std::fprintf(to, "\nExit status: 0 success, 2 usage error, 1 any other error.\n");
}

/// A subcommand's --help: its usage and summary, its options (command_help.h), and the ATTN
/// options from the method table but those the command takes otherwise ("[ATTN except --method
/// --k]").
void printCommandHelp(const Command& cmd) {
    std::printf("usage: sparqlab-cli %s %s\n\n%s\n%s", cmd.name, cmd.usage, cmd.summary,
                sparqlab::cli::commandDetails(cmd.name).c_str());
    const std::string usage = cmd.usage;
    if (usage.find("ATTN") == std::string::npos)
        return;
    std::set<std::string> except;
    if (const size_t at = usage.find("ATTN except "); at != std::string::npos) {
        std::istringstream words(usage.substr(at + 12, usage.find(']', at) - at - 12));
        for (std::string w; words >> w;)
            except.insert(w.erase(0, w.find_first_not_of('-')));
    }
    std::printf("\nATTN: %s\n", sparqlab::attention::attnUsage(except).c_str());
    for (const auto& p : sparqlab::attention::parameters())
        if (!except.count(p.option))
            std::printf("  --%-14s %s\n", p.option, p.help);
    std::printf("methods: %s (sparqlab-cli methods)\n", sparqlab::attention::methodNames().c_str());
}

/// The first line of an exception's message (libtorch adds a stack trace after it).
std::string firstLine(const std::exception& e) {
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    std::string msg = c10 ? c10->msg() : e.what();
    if (const size_t nl = msg.find('\n'); nl != std::string::npos)
        msg.resize(nl);
    return msg;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        printUsage(stderr);
        return 2;
    }
    const std::string& first = args.front();
    if (first == "--version" || first == "version") {
        std::printf("sparqlab-cli %s\n", SPARQLAB_VERSION);
        return 0;
    }
    if (first == "--help" || first == "-h" || first == "help") {
        if (args.size() > 1 && args[1] == "--all") // every subcommand's --help, in turn
            for (const Command& c : sparqlab::cli::commands()) {
                printCommandHelp(c);
                std::printf("\n");
            }
        else
            printUsage(stdout);
        return 0;
    }
    // (After the help, which computes nothing: the restart costs a start of libtorch.)
    sparqlab::attention::restartWithPassiveOpenMP(argv);
    sparqlab::attention::initRuntime();
    const Command* cmd = sparqlab::cli::findCommand(first);
    if (!cmd) {
        std::fprintf(stderr, "error: unknown subcommand '%s' (see sparqlab-cli --help)\n",
                     first.c_str());
        return 2;
    }
    args.erase(args.begin());
    for (const std::string& a : args)
        if (a == "--help" || a == "-h") {
            printCommandHelp(*cmd);
            return 0;
        }
    if (!cmd->run) {
        std::fprintf(stderr, "error: '%s' is not yet available in SparQ Lab %s\n", cmd->name,
                     SPARQLAB_VERSION);
        return 1;
    }
    try {
        return cmd->run(args);
    } catch (const sparqlab::cli::UsageError& e) {
        // One line, as every error (CONTRACTS.md §2); the usage is one --help away.
        std::fprintf(stderr, "error: %s (see sparqlab-cli %s --help)\n", e.what(), cmd->name);
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", firstLine(e).c_str());
        return 1;
    }
}
