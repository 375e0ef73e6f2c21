#include "session.h"

#include "attention/method_table.h"
#include "base/json_number.h"
#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <functional>

namespace sparqlab::analysis {

namespace att = sparqlab::attention;

namespace {

constexpr const char* kFormat = "sparqlab.session";
constexpr int64_t kVersion = 2; // 2: the view by name (1: by its index in the tabs of then)
/// Version 1's view indices, in the tab order of that version.
constexpr const char* kVersion1Views[] = {"head", "overview", "tradeoffs", "compare", "timing"};

/// The parameters a session keeps (calibration files are not: the lab calibrates on the prompt).
bool kept(att::Param p) {
    return p != att::Param::Basis && p != att::Param::Channels;
}

/// What a session must hold to open in the lab: the settings valid for its capture, the view in
/// range, the decode step's query held. Checked before writing and after reading.
void checkSession(const std::string& path, const Session& s) {
    auto bad = [&](const std::string& what) { throw att::AttentionError(path + ": " + what); };
    const LabCapture& c = *s.capture;
    try {
        s.config.validateFor(c.headDim(), c.layers(), c.heads(), c.kvHeads());
    } catch (const att::AttentionError& ex) {
        bad(ex.what());
    }
    const int64_t S = c.positions(), T = c.history();
    if (s.layer < 0 || s.layer >= c.layers())
        bad("session layer " + std::to_string(s.layer) + " is outside 0.." +
            std::to_string(c.layers() - 1));
    if (s.head < 0 || s.head >= c.heads())
        bad("session head " + std::to_string(s.head) + " is outside 0.." +
            std::to_string(c.heads() - 1));
    if (s.view.empty() || s.view.size() > 64 ||
        s.view.find_first_not_of("abcdefghijklmnopqrstuvwxyz_-0123456789") != std::string::npos)
        bad("session view '" + s.view + "' is not a view's name");
    if (c.promptPositions < 0 || c.promptPositions > S)
        bad("session prompt_positions " + std::to_string(c.promptPositions) + " is outside 0.." +
            std::to_string(S));
    if (s.step < -1 || s.step > c.steps())
        bad("session step " + std::to_string(s.step) + " is outside -1.." +
            std::to_string(c.steps()));
    if (s.step >= 0 && c.promptPositions - 1 + s.step < S - T)
        bad("session step " + std::to_string(s.step) + " needs a query the file does not hold");
    if (s.queryPosition != -1 && (s.queryPosition < S - T || s.queryPosition >= S))
        bad("session query_position " + std::to_string(s.queryPosition) + " is outside -1, " +
            std::to_string(S - T) + ".." + std::to_string(S - 1) + " (the queries the file holds)");
}

std::string chatJson(const SessionChat& c) {
    nlohmann::json j;
    j["system"] = c.system;
    j["turns"] = nlohmann::json::array();
    for (const text::ChatMessage& m : c.turns)
        j["turns"].push_back({{"role", m.role}, {"content", m.content}});
    j["add_generation_prompt"] = c.addGenerationPrompt;
    j["content_tokens"] = c.contentTokens;
    return j.dump();
}

/// The chat attribute, checked: its fields of their types, the ranges in order inside the
/// prompt's positions.
SessionChat readChat(const std::string& text, int64_t promptPositions,
                     const std::function<void(const std::string&)>& bad) {
    SessionChat c;
    c.on = true;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
        bad("session attribute 'chat' is not JSON");
    }
    if (!j.is_object() || !j.contains("system") || !j["system"].is_string() ||
        !j.contains("turns") || !j["turns"].is_array() || !j.contains("add_generation_prompt") ||
        !j["add_generation_prompt"].is_boolean() || !j.contains("content_tokens") ||
        !j["content_tokens"].is_array())
        bad("session attribute 'chat' needs system, turns, add_generation_prompt and "
            "content_tokens");
    c.system = j["system"].get<std::string>();
    c.addGenerationPrompt = j["add_generation_prompt"].get<bool>();
    for (const auto& t : j["turns"]) {
        if (!t.is_object() || !t.contains("role") || !t["role"].is_string() ||
            !t.contains("content") || !t["content"].is_string())
            bad("session chat turns must be {\"role\", \"content\"} strings");
        c.turns.push_back({t["role"].get<std::string>(), t["content"].get<std::string>()});
    }
    int64_t last = 0;
    for (const auto& r : j["content_tokens"]) {
        const auto b = r.is_array() && r.size() == 2
                           ? base::jsonWholeNumber(r[0], 0, promptPositions)
                           : std::nullopt;
        const auto e = r.is_array() && r.size() == 2
                           ? base::jsonWholeNumber(r[1], 0, promptPositions)
                           : std::nullopt;
        if (!b || !e || *b < last || *e <= *b)
            bad("session chat content_tokens must be [begin, end] pairs in order inside the "
                "prompt's " +
                std::to_string(promptPositions) + " positions, got " + r.dump());
        c.contentTokens.emplace_back(*b, *e);
        last = *e;
    }
    return c;
}

} // namespace

void writeSession(const std::string& path, const Session& s) {
    if (!s.capture || s.capture->layers() == 0)
        throw att::AttentionError(path + ": nothing to save: run a prompt first");
    checkSession(path, s); // nothing is written that would not open
    if (s.chat.on)
        readChat(chatJson(s.chat), s.capture->promptLength(),
                 [&](const std::string& what) { throw att::AttentionError(path + ": " + what); });
    capture::CaptureWriter w(path, s.capture->info);
    w.add(s.capture->toExample());
    { // the group is closed before the file is committed: HDF5 keeps a file with an open
      // object open, and would write its last metadata after the rename (the file would differ
      // from what File::commit remembered, and be probed in a child process when read again)
        const h5::Group g = w.root().createGroup("session");
        g.setAttr("format", std::string(kFormat));
        g.setAttr("format_version", kVersion);
        g.setAttr("model", s.model);
        g.setAttr("prompt", s.prompt);
        g.setAttr("generated", s.generated);
        g.setAttr("method", att::methodName(s.config.method));
        for (const att::ParamInfo& p : att::parameters())
            if (kept(p.id))
                g.setAttr(p.attribute, att::paramValue(s.config, p.id));
        g.setAttr("layer", s.layer);
        g.setAttr("head", s.head);
        g.setAttr("view", s.view);
        g.setAttr("measure", s.measure);
        g.setAttr("compare_method", att::methodName(s.compareMethod));
        g.setAttr("step", s.step);
        g.setAttr("query_position", s.queryPosition);
        g.setAttr("prompt_positions", s.capture->promptPositions);
        g.setAttr("timing", s.timing);
        if (s.chat.on)
            g.setAttr("chat", chatJson(s.chat));
    }
    w.finish();
}

Session readSession(const std::string& path) {
    const capture::CaptureReader r(path);
    const h5::Group root = r.root();
    auto bad = [&](const std::string& what) -> void {
        throw att::AttentionError(path + ": " + what);
    };
    if (r.count() != 1)
        bad("a session holds one prompt, this file " + std::to_string(r.count()) +
            " (open a capture of one prompt)");
    Session s;
    const model::CaptureExample e = r.read(0);
    const int64_t S = e.tokenIds.numel(), T = e.qPositions.numel();
    // The lab holds the queries of the last T positions, in order.
    if (!e.qPositions.equal(at::arange(S - T, S, at::kLong)))
        bad("the lab needs the queries of the last positions, in order (capture with "
            "--all-queries, or without --generate)");
    s.capture = LabCapture::from(e, r.info());
    if (!root.has("session")) { // a capture made elsewhere: the lab's default settings
        s.model = r.info().model;
        for (const std::string& t : s.capture->tokens)
            s.prompt += t;
        return s;
    }
    const h5::Group g = root.group("session");
    auto text = [&](const char* name) {
        if (!g.hasAttribute(name))
            bad(std::string("session attribute '") + name + "' is missing");
        return g.attrString(name);
    };
    auto integer = [&](const char* name) {
        if (!g.hasAttribute(name))
            bad(std::string("session attribute '") + name + "' is missing");
        return g.attrInt(name);
    };
    if (text("format") != kFormat)
        bad("session format is '" + g.attrString("format") + "', expected '" + kFormat + "'");
    const int64_t version = integer("format_version");
    if (version != 1 && version != kVersion)
        bad("session format_version " + std::to_string(version) +
            " is not supported (this build reads versions 1 and 2)");
    s.model = text("model");
    s.prompt = text("prompt");
    s.generated = text("generated");
    s.measure = text("measure");
    s.timing = text("timing");
    try {
        s.config.method = att::parseMethod(text("method"));
        for (const att::ParamInfo& p : att::parameters()) {
            if (!kept(p.id))
                continue;
            const std::string v = text(p.attribute);
            if (p.id == att::Param::MeanValue) {
                if (v != "1")
                    att::setParamValue(s.config, p.id, v); // the flag: off
                continue;
            }
            try {
                att::setParamValue(s.config, p.id, v); // (k "none": a top-p method without a cap)
            } catch (const std::exception& ex) {
                bad(std::string("session attribute '") + p.attribute + "': " + ex.what());
            }
        }
        s.compareMethod = att::parseMethod(text("compare_method"));
    } catch (const att::AttentionError& ex) {
        const std::string what = ex.what();
        if (what.rfind(path, 0) == 0)
            throw;
        bad(what);
    }
    s.layer = integer("layer");
    s.head = integer("head");
    if (version == 1) {
        const int64_t v = integer("view");
        if (v < 0 || v > 4)
            bad("session view " + std::to_string(v) + " is outside 0..4");
        s.view = kVersion1Views[v];
    } else {
        s.view = text("view");
    }
    s.step = integer("step");
    if (g.hasAttribute("query_position")) // sessions before it: the step's query
        s.queryPosition = integer("query_position");
    s.capture->promptPositions = integer("prompt_positions");
    checkSession(path, s);
    if (g.hasAttribute("chat"))
        s.chat = readChat(g.attrString("chat"), s.capture->promptLength(), bad);
    return s;
}

} // namespace sparqlab::analysis
