#pragma once
/// \file session.h
/// A lab session in one HDF5 file: the capture the lab shows (a capture file, CONTRACTS.md §3,
/// so every command that reads captures reads it), and a /session group with the prompt, the
/// generated text, the attention settings and the view. Opening it restores the lab without
/// the model's weights. libtorch and HDF5 only (no Qt).
///
/// /session attributes: format = "sparqlab.session", format_version = 2 (1 is read too), model,
/// prompt,
/// generated, method, one attribute per method parameter (method_table.h ParamInfo::attribute, as
/// attention::paramValue writes it; calibration files are not kept: the lab calibrates on the
/// prompt), layer, head, view (the view's name: "head", "overview", …; version 1 stored its index),
/// measure, compare_method (a method name), step (the decode step shown, −1: the last position),
/// query_position (the position whose query the views show when it is not a decode step's, −1:
/// the step's; optional, absent in older sessions),
/// prompt_positions (positions of the prompt; the rest were generated), timing (the timing
/// panel's text when saved, may be empty), and, when the prompt was a chat, chat (JSON text:
/// {"system", "turns": [{"role", "content"}], "add_generation_prompt", "content_tokens":
/// [[begin, end], …]}, the prompt box's chat and which positions were message content).

#include "analysis/lab.h"
#include "text/chat_template.h"

#include <memory>
#include <string>

namespace sparqlab::analysis {

/// A prompt given as a chat: the prompt box's turns and the template's rendering's content.
struct SessionChat {
    bool on = false;
    std::string system;
    std::vector<text::ChatMessage> turns;
    bool addGenerationPrompt = true;
    /// Token ranges [begin, end) of message content; the other prompt positions are the
    /// template's.
    std::vector<std::pair<int64_t, int64_t>> contentTokens;
};

struct Session {
    std::shared_ptr<LabCapture> capture;
    std::string model;     ///< the model it was captured with (path, hub id or "demo")
    std::string prompt;    ///< the prompt box's text
    std::string generated; ///< the generated continuation (may be empty)
    attention::AttentionConfig config;
    int64_t layer = 0, head = 0;
    std::string view = "head"; ///< the view shown, by name (the GUI's view table)
    std::string measure;       ///< the overview's measure label
    attention::Method compareMethod = attention::Method::Quest; ///< the compare view's second
    int64_t step = -1;                                          ///< decode step, −1: the last
    int64_t queryPosition = -1; ///< the query shown when not the step's (−1: the step's)
    std::string timing;         ///< the timing panel's text
    SessionChat chat;
};

/// Writes `s` to `path` (a temporary name, renamed when complete). Throws with one line.
void writeSession(const std::string& path, const Session& s);

/// Reads and checks a session: the capture as any capture is checked, then every session
/// attribute (present, of its type, in range for the capture). A capture of one prompt without
/// a /session group (sparqlab-cli capture) opens with the lab's default settings. Throws
/// h5::H5Error or attention::AttentionError with one line naming the file.
Session readSession(const std::string& path);

} // namespace sparqlab::analysis
