// The bad-input suite's chat-template cases (issue 35): templates that do not parse, raise, never
// end or recurse without end, and configs that hold no usable template. Each is one line naming
// the file, the line and the construct.

#include "bad_input.h"

namespace sparqlab::test::bad_input {

QList<Case> chatTemplateCases(const QString& model) {
    QList<Case> c;
    // The model's template replaced by `tpl` (in chat_template.jinja or the config), then
    // generate --chat.
    auto chat = [=](QByteArray tpl, bool inConfig) {
        return [=](const QString& dir) {
            const QString m = copyModel(model, dir);
            if (inConfig)
                writeAll(m + "/tokenizer_config.json", tpl);
            else
                writeAll(m + "/chat_template.jinja", tpl);
            return QStringList{"generate", "--model",          m,  "--chat", "--prompt",
                               "hi",       "--max-new-tokens", "1"};
        };
    };
    c << Case{"chat template with an unclosed block",
              chat("{% for m in messages %}\n{{ m.content }}\n", false),
              1,
              {"chat_template.jinja: line 1", "never closed", "endfor"}};
    c << Case{"chat template with an unknown filter",
              chat("\n{{ messages | shuffle }}", false),
              1,
              {"chat_template.jinja: line 2", "no filter named 'shuffle'"}};
    c << Case{"chat template with an unknown tag",
              chat("{% include 'other.jinja' %}", false),
              1,
              {"chat_template.jinja: line 1", "'include' tag is not supported"}};
    c << Case{"chat template not UTF-8",
              chat("{{ bos_token }}\xff\xfe{% for m in messages %}{% endfor %}", false),
              1,
              {"chat_template.jinja", "not UTF-8"}};
    c << Case{"chat template raising an exception",
              chat("{% if messages[0].role != 'system' %}{{ raise_exception('a system "
                   "message comes first') }}{% endif %}",
                   false),
              1,
              {"chat_template.jinja: line 1", "raise_exception(): a system message comes first"}};
    // Each inner iteration evaluates 200 additions, so the step bound is met after ~10^5
    // iterations (seconds even under ASan; a bare double loop builds a loop object per step).
    QByteArray sum = "b";
    for (int i = 0; i < 199; ++i)
        sum += "+b";
    c << Case{"chat template that never ends",
              chat("{% for a in range(100000) %}{% for b in range(100000) %}{% if " + sum +
                       " %}{% endif %}{% endfor %}{% endfor %}",
                   false),
              1,
              {"chat_template.jinja", "runs too long"}};
    c << Case{"chat template recursing without end",
              chat("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", false),
              1,
              {"chat_template.jinja", "more than 100 deep"}};
    c << Case{"chat template of the wrong type in the config",
              chat(R"({"chat_template": 7})", true),
              1,
              {"tokenizer_config.json", "chat_template must be a string"}};
    c << Case{"chat template list without a default",
              chat(R"({"chat_template": [{"name": "rag", "template": "x"}]})", true),
              1,
              {"tokenizer_config.json", "no template named \"default\""}};
    c << Case{"tokenizer_config malformed JSON",
              chat("{\"chat_template\": \"x", true), // moc misreads this as a raw string
              1,
              {"tokenizer_config.json", "malformed JSON"}};
    c << Case{"no chat template",
              [=](const QString& dir) {
                  const QString m = copyModel(model, dir);
                  QFile::remove(m + "/tokenizer_config.json");
                  return QStringList{"generate", "--model",          m,  "--chat", "--prompt",
                                     "hi",       "--max-new-tokens", "1"};
              },
              1,
              {"the model has no chat template"}};
    c << Case{
        "chat messages not a list",
        [=](const QString& dir) {
            const QString m = copyModel(model, dir);
            writeAll(m + "/chat_template.jinja", "{{ messages | length }}");
            writeAll(dir + "/messages.json", R"({"role": "user"})");
            return QStringList{"chat-template", "--model", m, "--messages", dir + "/messages.json"};
        },
        1,
        {"messages.json", "JSON array"}};
    return c;
}

} // namespace sparqlab::test::bad_input
