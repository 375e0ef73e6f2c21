#pragma once
/// \file chat_template.h
/// A model's chat template (tokenizer_config.json's `chat_template`, or chat_template.jinja
/// beside it) rendered as transformers' apply_chat_template renders it: the messages, `tools`
/// and `documents` (none unless given), add_generation_prompt and the tokenizer's special
/// tokens as variables; and the rendering's spans of message content, so that a view can tell
/// the template's tokens from the content's (docs/chat-templates.md).
///
/// Threading: immutable after loading; render() is reentrant.

#include "text/jinja/template.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sparqlab::text {

class Tokenizer;

/// One message of a conversation.
struct ChatMessage {
    std::string role; ///< "system", "user", "assistant", "tool"
    std::string content;
};

/// The messages of a JSON array ([{"role", "content"}, …]); other fields (tool_calls, name)
/// are kept in the JSON the template sees. Throws std::runtime_error naming `where` when it is
/// not such an array.
nlohmann::ordered_json parseMessages(const std::string& text, const std::string& where);
nlohmann::ordered_json toJson(const std::vector<ChatMessage>& messages);

/// A rendered conversation.
struct ChatRendering {
    std::string text;
    /// Byte ranges [begin, end) of `text` that are message content (in order); the rest is the
    /// template's.
    std::vector<std::pair<size_t, size_t>> content;
};

class ChatTemplate {
public:
    /// The folder's template: chat_template.jinja, else tokenizer_config.json's chat_template
    /// (a string, or a list of {name, template}: the one named "default"). nullopt when the
    /// folder has none; TemplateError/std::runtime_error naming the file when it is broken.
    static std::optional<ChatTemplate> fromFolder(const std::string& folder);
    /// A template's text (the special tokens none).
    static ChatTemplate fromSource(const std::string& source, const std::string& name);

    /// Renders `messages` (a JSON array) as apply_chat_template does; `extra` adds variables
    /// (tools, documents, enable_thinking, …). Throws jinja::TemplateError.
    ChatRendering render(const nlohmann::ordered_json& messages, bool addGenerationPrompt,
                         const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                         const jinja::RenderOptions& options = {}) const;
    /// The variables render() passes (without messages), for `chat-template --model`.
    nlohmann::ordered_json context(const nlohmann::ordered_json& messages, bool addGenerationPrompt,
                                   const nlohmann::ordered_json& extra) const;
    const std::string& source() const { return m_source; }
    const std::string& name() const { return m_template.name(); }

private:
    jinja::Template m_template;
    std::string m_source;
    nlohmann::ordered_json m_specialTokens = nlohmann::ordered_json::object();
};

/// The turns a prompt box holds: a line starting "system:", "user:" or "assistant:" (any case)
/// starts a turn of that role; text before the first such line is a user turn. A turn's text
/// loses the one space after the colon and its trailing line breaks.
std::vector<ChatMessage> parseTurns(const std::string& text);
/// Turns back as parseTurns reads them.
std::string formatTurns(const std::vector<ChatMessage>& turns);

/// Token ranges [begin, end) of `ids` = chatIds(rendering) that are message content: each span
/// of rendering.content mapped through the token counts of the text before and up to it (the
/// template's special tokens and line breaks make these boundaries exact in practice).
std::vector<std::pair<int64_t, int64_t>> contentTokenRanges(const Tokenizer& tokenizer,
                                                            const ChatRendering& rendering);

/// The folder's template, or std::runtime_error "FOLDER: the model has no chat template …".
ChatTemplate requireChatTemplate(const std::string& folder);

/// A conversation of one user turn, after a system turn when `system` is not empty.
nlohmann::ordered_json userConversation(const std::string& user, const std::string& system = {});

/// The ids apply_chat_template(tokenize=True) gives: the rendering tokenized without added
/// special tokens (the template writes its own).
std::vector<int64_t> chatIds(const Tokenizer& tokenizer, const ChatRendering& rendering);

} // namespace sparqlab::text
