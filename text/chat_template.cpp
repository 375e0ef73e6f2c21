// A model's chat template (chat_template.h).

#include "chat_template.h"

#include "base/read_file.h"
#include "text/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sparqlab::text {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string readText(const fs::path& p) {
    std::optional<std::string> text = base::readWholeFile(p.string());
    if (!text)
        throw std::runtime_error(p.string() + ": cannot read");
    return std::move(*text);
}

/// A special token as tokenizer_config.json writes it: a string or {"content": …}.
std::optional<std::string> tokenText(const ojson& v) {
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return std::nullopt;
}

} // namespace

ojson parseMessages(const std::string& text, const std::string& where) {
    ojson j;
    try {
        j = ojson::parse(text);
    } catch (const ojson::exception& e) {
        throw std::runtime_error(where + ": malformed JSON: " + e.what());
    }
    if (!j.is_array())
        throw std::runtime_error(where + ": the messages must be a JSON array of {\"role\", "
                                         "\"content\"} objects");
    for (size_t i = 0; i < j.size(); ++i)
        if (!j[i].is_object() || !j[i].contains("role") || !j[i]["role"].is_string())
            throw std::runtime_error(where + ": message " + std::to_string(i) +
                                     " needs a \"role\" string");
    return j;
}

ojson toJson(const std::vector<ChatMessage>& messages) {
    ojson j = ojson::array();
    for (const ChatMessage& m : messages)
        j.push_back({{"role", m.role}, {"content", m.content}});
    return j;
}

ChatTemplate ChatTemplate::fromSource(const std::string& source, const std::string& name) {
    ChatTemplate t;
    t.m_source = source;
    t.m_template = jinja::Template::parse(source, name);
    return t;
}

std::optional<ChatTemplate> ChatTemplate::fromFolder(const std::string& folder) {
    const fs::path jinjaFile = fs::path(folder) / "chat_template.jinja";
    const fs::path config = fs::path(folder) / "tokenizer_config.json";
    std::error_code ec;
    ojson cfg = ojson::object();
    if (fs::exists(config, ec)) {
        try {
            cfg = ojson::parse(readText(config));
        } catch (const ojson::exception& e) {
            throw std::runtime_error(config.string() + ": malformed JSON: " + e.what());
        }
        if (!cfg.is_object())
            throw std::runtime_error(config.string() + ": must be a JSON object");
    }
    std::optional<ChatTemplate> t;
    if (fs::exists(jinjaFile, ec)) {
        t = fromSource(readText(jinjaFile), jinjaFile.string());
    } else if (cfg.contains("chat_template")) {
        const ojson& ct = cfg["chat_template"];
        const std::string where = config.string() + " (chat_template)";
        if (ct.is_string()) {
            t = fromSource(ct.get<std::string>(), where);
        } else if (ct.is_array()) { // named templates: the default one
            for (const ojson& e : ct)
                if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
                    e["template"].is_string())
                    t = fromSource(e["template"].get<std::string>(), where + "[default]");
            if (!t)
                throw std::runtime_error(config.string() +
                                         ": chat_template lists no template named \"default\"");
        } else if (!ct.is_null()) {
            throw std::runtime_error(config.string() +
                                     ": chat_template must be a string or a list of templates");
        }
    }
    if (!t)
        return std::nullopt;
    // transformers passes the special tokens map: bos_token, eos_token, … that are set.
    for (const char* k : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"})
        if (cfg.contains(k))
            if (const auto s = tokenText(cfg[k]))
                t->m_specialTokens[k] = *s;
    if (cfg.contains("additional_special_tokens") && cfg["additional_special_tokens"].is_array()) {
        ojson list = ojson::array();
        for (const ojson& e : cfg["additional_special_tokens"])
            if (const auto s = tokenText(e))
                list.push_back(*s);
        t->m_specialTokens["additional_special_tokens"] = list;
    }
    return t;
}

ojson ChatTemplate::context(const ojson& messages, bool addGenerationPrompt,
                            const ojson& extra) const {
    // apply_chat_template: render(messages=…, tools=…, documents=…, add_generation_prompt=…,
    // **template_kwargs) with the special tokens among the kwargs.
    ojson c = ojson::object();
    c["messages"] = messages;
    c["tools"] = nullptr;
    c["documents"] = nullptr;
    c["add_generation_prompt"] = addGenerationPrompt;
    for (auto it = m_specialTokens.begin(); it != m_specialTokens.end(); ++it)
        c[it.key()] = it.value();
    if (extra.is_object())
        for (auto it = extra.begin(); it != extra.end(); ++it)
            c[it.key()] = it.value();
    return c;
}

ChatRendering ChatTemplate::render(const ojson& messages, bool addGenerationPrompt,
                                   const ojson& extra, const jinja::RenderOptions& options) const {
    ChatRendering r;
    r.text = m_template.render(context(messages, addGenerationPrompt, extra), options);
    // Each message's content where the template put it, searched in order.
    size_t from = 0;
    for (const ojson& m : messages) {
        if (!m.contains("content") || !m["content"].is_string())
            continue;
        const std::string content = m["content"].get<std::string>();
        if (content.empty())
            continue;
        size_t at = r.text.find(content, from);
        if (at == std::string::npos) { // a template that trims the content: its trimmed text
            const size_t b = content.find_first_not_of(" \t\n\r");
            const size_t e = content.find_last_not_of(" \t\n\r");
            if (b == std::string::npos)
                continue;
            const std::string trimmed = content.substr(b, e - b + 1);
            at = r.text.find(trimmed, from);
            if (at == std::string::npos)
                continue;
            r.content.emplace_back(at, at + trimmed.size());
            from = at + trimmed.size();
            continue;
        }
        r.content.emplace_back(at, at + content.size());
        from = at + content.size();
    }
    return r;
}

ChatTemplate requireChatTemplate(const std::string& folder) {
    auto t = ChatTemplate::fromFolder(folder);
    if (!t)
        throw std::runtime_error(folder + ": the model has no chat template (no chat_template in "
                                          "tokenizer_config.json, no chat_template.jinja)");
    return std::move(*t);
}

ojson userConversation(const std::string& user, const std::string& system) {
    ojson m = ojson::array();
    if (!system.empty())
        m.push_back({{"role", "system"}, {"content", system}});
    m.push_back({{"role", "user"}, {"content", user}});
    return m;
}

std::vector<int64_t> chatIds(const Tokenizer& tokenizer, const ChatRendering& rendering) {
    return tokenizer.encode(rendering.text, /*addSpecial=*/false);
}

std::vector<ChatMessage> parseTurns(const std::string& text) {
    std::vector<ChatMessage> turns;
    auto finish = [&turns] {
        if (turns.empty())
            return;
        std::string& c = turns.back().content;
        while (!c.empty() && (c.back() == '\n' || c.back() == '\r'))
            c.pop_back();
    };
    size_t at = 0;
    while (at <= text.size()) {
        const size_t nl = text.find('\n', at);
        const size_t end = nl == std::string::npos ? text.size() : nl + 1;
        const std::string line = text.substr(at, end - at);
        std::string role;
        for (const char* r : {"system", "user", "assistant"}) {
            const size_t n = std::char_traits<char>::length(r);
            if (line.size() > n && line[n] == ':' &&
                std::equal(r, r + n, line.begin(), [](char a, char b) {
                    return a == std::tolower(static_cast<unsigned char>(b));
                })) {
                role = r;
                break;
            }
        }
        if (!role.empty()) {
            finish();
            std::string rest = line.substr(role.size() + 1);
            if (!rest.empty() && rest.front() == ' ')
                rest.erase(0, 1);
            turns.push_back({role, rest});
        } else if (turns.empty()) {
            if (line.find_first_not_of(" \t\r\n") != std::string::npos)
                turns.push_back({"user", line});
        } else {
            turns.back().content += line;
        }
        if (nl == std::string::npos)
            break;
        at = end;
    }
    finish();
    return turns;
}

std::string formatTurns(const std::vector<ChatMessage>& turns) {
    std::string out;
    for (const ChatMessage& m : turns) {
        if (!out.empty())
            out += '\n';
        out += m.role + ": " + m.content;
    }
    return out;
}

std::vector<std::pair<int64_t, int64_t>> contentTokenRanges(const Tokenizer& tokenizer,
                                                            const ChatRendering& rendering) {
    std::vector<std::pair<int64_t, int64_t>> out;
    const auto count = [&](size_t bytes) {
        return static_cast<int64_t>(
            tokenizer.encode(rendering.text.substr(0, bytes), false).size());
    };
    for (const auto& [b, e] : rendering.content) {
        const int64_t lo = count(b), hi = count(e);
        if (hi > lo)
            out.emplace_back(lo, hi);
    }
    return out;
}

} // namespace sparqlab::text
