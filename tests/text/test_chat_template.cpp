// The Jinja engine and chat templates (docs/chat-templates.md): every golden under
// ../shared/refs/chat renders byte for byte, the single-feature cases of tests/data render as
// Python's Jinja2 does, errors are one line naming the template, the line and the construct,
// and a hostile template is stopped by its bounds.

#include "test_support.h"

#include "text/chat_template.h"
#include "text/jinja/template.h"
#include "text/tokenizer.h"

#include <QDirIterator>
#include <QtTest>

#include <fstream>
#include <sstream>

namespace jinja = sparqlab::text::jinja;
using sparqlab::text::ChatTemplate;
using ojson = nlohmann::ordered_json;

namespace {

struct Case {
    std::string file, name, tpl, expected, now;
    ojson context;
};

std::vector<Case> readCases(const QString& path) {
    std::vector<Case> out;
    std::ifstream in(path.toStdString());
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty())
            continue;
        const ojson j = ojson::parse(line);
        Case c;
        c.file = path.toStdString();
        c.name = j.at("name").get<std::string>();
        c.tpl = j.at("template").get<std::string>();
        c.context = j.value("context", ojson::object());
        // Where HF's JS library and Python's Jinja2 differ, transformers renders with Jinja2.
        const bool agrees = j.value("jinja2_agrees", true);
        c.expected = !agrees && j.contains("jinja2_expected")
                         ? j["jinja2_expected"].get<std::string>()
                         : j.at("expected").get<std::string>();
        c.now = j.value("now", "");
        out.push_back(std::move(c));
    }
    return out;
}

std::string render(const std::string& tpl, const ojson& context = ojson::object(),
                   const jinja::RenderOptions& o = {}) {
    return jinja::Template::parse(tpl, "t.jinja").render(context, o);
}

std::string repeat(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i)
        out += s;
    return out;
}

/// The error a template gives (parse or render), empty when it renders.
QString errorOf(const std::string& tpl, const jinja::RenderOptions& o = {}) {
    try {
        render(tpl, ojson::object(), o);
    } catch (const jinja::TemplateError& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

} // namespace

class TestChatTemplate : public QObject {
    Q_OBJECT

    static void checkCases(const std::vector<Case>& cases, int* checked) {
        for (const Case& c : cases) {
            jinja::RenderOptions o;
            o.now = c.now;
            std::string got;
            try {
                got = jinja::Template::parse(c.tpl, c.name).render(c.context, o);
            } catch (const std::exception& e) {
                QFAIL(qPrintable(QString::fromStdString(c.file + ": " + c.name + ": " + e.what())));
            }
            if (got != c.expected)
                QFAIL(qPrintable(QString::fromStdString(c.file + ": " + c.name + ": rendered\n" +
                                                        got + "\nexpected\n" + c.expected)));
            ++*checked;
        }
    }

private Q_SLOTS:
    void everyGoldenRendersByteForByte() {
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/chat"));
        const QString dir = sparqlab::test::sharedFile(QStringLiteral("refs/chat"));
        int checked = 0, files = 0;
        // Every golden file of the set, in any folder (two files, 55 cases in the set shown).
        QDirIterator it(dir, {QStringLiteral("*.jsonl")}, QDir::Files,
                        QDirIterator::Subdirectories | QDirIterator::FollowSymlinks);
        while (it.hasNext()) {
            checkCases(readCases(it.next()), &checked);
            ++files;
        }
        QVERIFY(files >= 1);
        QVERIFY2(checked > 0, qPrintable(QString::number(checked)));
    }

    void singleFeatureCasesRenderAsJinja2Does() {
        int checked = 0;
        checkCases(
            readCases(sparqlab::test::sourcePath(QStringLiteral("tests/data/jinja_cases.jsonl"))),
            &checked);
        QVERIFY(checked >= 60);
    }

    void transformersRenderingMode() {
        // trim_blocks, lstrip_blocks and one trailing newline dropped.
        QCOMPARE(render("{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}\n"),
                 std::string("  1\n  2\n"));
        // tojson as json.dumps(ensure_ascii=False): ", " and ": ", key order kept.
        const ojson ctx = ojson::parse(R"({"t": {"z": 1, "a": [true, null, "é"]}})");
        QCOMPARE(render("{{ t | tojson }}", ctx),
                 std::string(R"({"z": 1, "a": [true, null, "é"]})"));
        // Undefined prints empty; a defined none prints None; booleans as Python prints them.
        QCOMPARE(render("[{{ nothing }}]{{ n }}{{ b }}", ojson::parse(R"({"n": null, "b": true})")),
                 std::string("[]NoneTrue"));
        jinja::RenderOptions o;
        o.now = "2024-02-29T23:59:00Z";
        QCOMPARE(render("{{ strftime_now('%d %b %Y, %A') }}", ojson::object(), o),
                 std::string("29 Feb 2024, Thursday"));
    }

    void splitKeepsTheRestAsPythonDoes() {
        // str.split / rsplit with a maximum count: Python keeps the rest of the string as it is
        // (the spaces at its far end too); runs of spaces separate the parts split off.
        QCOMPARE(render("{{ '  a  b c  '.split(none, 1) }}"), std::string("['a', 'b c  ']"));
        QCOMPARE(render("{{ '  a  b c  '.rsplit(none, 1) }}"), std::string("['  a  b', 'c']"));
        QCOMPARE(render("{{ ' a b '.split(none, 0) }}|{{ ' a b '.rsplit(none, 0) }}"),
                 std::string("['a b ']|[' a b']"));
        QCOMPARE(render("{{ '  a  b c  '.split() }}"), std::string("['a', 'b', 'c']"));
        QCOMPARE(render("{{ '   '.split(none, 1) }}"), std::string("[]"));
        QCOMPARE(render("{{ 'a,b,,c'.split(',', 2) }}|{{ 'a,b,,c'.rsplit(',', 2) }}"),
                 std::string("['a', 'b', ',c']|['a,b', '', 'c']"));
    }

    void errorsAreOneLineNamingTemplateLineAndConstruct() {
        const struct {
            std::string tpl, says;
        } cases[] = {
            {"a\n{% if x %}b\nc", "line 2: this block is never closed (no {% endif %} follows)"},
            {"{% for m in messages %}\n{{ m }}", "no {% endfor %}"},
            {"{{ x | frobnicate }}", "line 1: no filter named 'frobnicate'"},
            // In an if, Jinja2 3 raises when the branch runs (its soft frames); a loop inside
            // the if is a frame of its own, checked when the template is read.
            {"{% if true %}\n{{ 1 | frobnicate }}{% endif %}",
             "line 2: no filter named 'frobnicate'"},
            {"{% if false %}{% for j in [1] %}{{ j | frob }}{% endfor %}{% endif %}",
             "line 1: no filter named 'frob'"},
            {"\n\n{{ x is frob }}", "line 3: no test named 'frob'"},
            {"{% frob %}", "unknown tag 'frob'"},
            {"{% include 'a' %}", "the 'include' tag is not supported"},
            // Where Jinja2 raises: int() of Undefined, a missing str.format key, format's
            // mixed arguments, 0.0 to a negative power, an unhashable value in a set or as a key.
            {"{{ u|int }}", "line 1: 'u' is undefined"},
            {"{{ '{x}'.format(1) }}", "KeyError: 'x'"},
            {"{{ '%s'|format(1, x=2) }}", "can't handle positional and keyword arguments"},
            {"{{ '%d' % 'a' }}", "%d format: a real number is required, not str"},
            {"{{ 'a %' % () }}", "incomplete format"},
            {"{{ '%q' % 1 }}", "unsupported format character 'q'"},
            {"{{ '%s %s' % (1,) }}", "not enough arguments for format string"},
            {"{{ '%(a)s' % (1,) }}", "format requires a mapping"},
            {"{{ '{:d}'.format('s') }}", "Unknown format code 'd' for object of type 'str'"},
            {"{{ '{} {1}'.format(1, 2) }}",
             "cannot switch from manual field specification to automatic field numbering"},
            {"{{ '%*s' % (2000000000, 'x') }}", "width too big"},
            {"{{ '{:{:{:{}}}}'.format(1, 2, 3, 4) }}", "Max string recursion exceeded"},
            {"{{ '{:+s}'.format('a') }}", "Sign not allowed in string format specifier"},
            {"{{ 0.0 ** -1 }}", "0.0 cannot be raised to a negative power"},
            {"{{ [{'a': 1}, {'a': 1}]|unique|list }}", "unhashable type: 'dict'"},
            {"{{ [1] in {'a': 1} }}", "unhashable type: 'list'"},
            {"{{ x", "never closed"},
            {"x\n{{ raise_exception('Conversation roles must alternate') }}",
             "line 2: raise_exception(): Conversation roles must alternate"},
            {"{{ 1 / 0 }}", "division by zero"},
            {"{% for n in [[1]] %}{{ loop(n) }}{% endfor %}",
             "The loop must have the 'recursive' marker to be called recursively."},
            {"{% for n in [[1]] recursive %}{{ loop(n, n) }}{% endfor %}",
             "loop() takes the items to loop over, one argument"},
            {"{{ cycler().next() }}", "cycler(): at least one item has to be provided"},
            {"{{ [1] + 1 }}", "unsupported operand"},
        };
        for (const auto& c : cases) {
            const QString e = errorOf(c.tpl);
            QVERIFY2(e.startsWith(QStringLiteral("t.jinja: line ")), qPrintable(e));
            QVERIFY2(e.contains(QString::fromStdString(c.says)), qPrintable(e));
            QVERIFY2(!e.contains('\n'), qPrintable(e));
        }
        // Not UTF-8: refused before anything is parsed, with the byte's place.
        const QString e = errorOf(std::string("ok\n\xff{{ x }}"));
        QVERIFY2(e.contains(QStringLiteral("not UTF-8")), qPrintable(e));
    }

    void hostileTemplatesAreBounded() {
        jinja::RenderOptions o;
        o.maxSteps = 200000;
        o.maxOutput = 1 << 20;
        const struct {
            std::string tpl, says;
        } cases[] = {
            {"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
             "runs too long"},
            {"{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}", "more than 100 deep"},
            {"{% for n in [1] recursive %}{{ loop([n]) }}{% endfor %}", "more than 100 deep"},
            {"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s "
             "%}{% endfor %}{{ ns.s }}",
             "more than"},
            {"{{ 'a' * 100000000 }}", "more than"},
            {"{{ ('{0:999999}' * 100).format(1) }}", "more than"},
            {"{{ ('%999999s' * 100) % ((1,) * 100) }}", "more than"},
            {"{{ range(1000000000) | length }}", "Range too big"},
            {repeat("{% if true %}", 300), "nested too deeply"},
            {"{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}",
             "nested too deeply"},
            {"{{ " + std::string(2000, '[') + std::string(2000, ']') + " }}", "nested too deeply"},
            // Found by the smoke fuzz: a namespace holding itself printed forever.
            {"{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns.n }}",
             "a namespace cannot hold a namespace"},
            {"{% set ns = namespace(n=[]) %}{% for i in range(100000) %}{% set ns.n = [ns.n] "
             "%}{% endfor %}{{ ns.n }}",
             "nested more than 256 deep"},
            {"{{ x.99999999999999999999 }}", "out of range"}, // found by fuzz_chat_template
            {"{{ 'a'|center(2000000000) }}", "more than"},
            {"{{ 'a'.rjust(2000000000) }}", "more than"},
            {"{{ 'a\nb'|indent(2000000000) }}", "more than"},
            {"{{ '1'.zfill(2000000000) }}", "more than"},
        };
        for (const auto& c : cases) {
            const QString e = errorOf(c.tpl, o);
            QVERIFY2(e.contains(QString::fromStdString(c.says)), qPrintable(e));
        }
    }

    void turnsOfThePromptBox() {
        using sparqlab::text::ChatMessage;
        const auto t = sparqlab::text::parseTurns(
            "What is SparQ?\nTwo lines.\nAssistant: An approximation.\n\nuser:Why?\n");
        QCOMPARE(t.size(), size_t{3});
        QCOMPARE(t[0].role, std::string("user"));
        QCOMPARE(t[0].content, std::string("What is SparQ?\nTwo lines."));
        QCOMPARE(t[1].role, std::string("assistant"));
        QCOMPARE(t[1].content, std::string("An approximation."));
        QCOMPARE(t[2].content, std::string("Why?"));
        const auto back = sparqlab::text::parseTurns(sparqlab::text::formatTurns(t));
        QCOMPARE(back.size(), t.size());
        for (size_t i = 0; i < t.size(); ++i)
            QVERIFY(back[i].role == t[i].role && back[i].content == t[i].content);
        QVERIFY(sparqlab::text::parseTurns(" \n").empty());
    }

    void contentTokensSpellTheTurns() {
        // With a real tokenizer, each content range decodes to its message; the rest is the
        // template's.
        SPARQLAB_NEED_REFERENCE(QStringLiteral("refs/tokenizers/gpt2/tokenizer.json"));
        const QString tok =
            sparqlab::test::sharedFile(QStringLiteral("refs/tokenizers/gpt2/tokenizer.json"));
        // GPT-2's tokenizer with ChatML's two special tokens added, as Qwen's has them.
        nlohmann::json tj;
        {
            std::ifstream in(tok.toStdString());
            tj = nlohmann::json::parse(in);
        }
        for (const char* special : {"<|im_start|>", "<|im_end|>"})
            tj["added_tokens"].push_back({{"id", 50257 + tj["added_tokens"].size()},
                                          {"content", special},
                                          {"single_word", false},
                                          {"lstrip", false},
                                          {"rstrip", false},
                                          {"normalized", false},
                                          {"special", true}});
        const auto tokenizer = sparqlab::text::Tokenizer::fromJson(tj.dump(), "chatml.json");
        const auto t = ChatTemplate::fromSource(
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor "
            "%}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
            "qwen-like");
        const ojson messages = ojson::parse(
            R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Où est la gare? Ça va."}, {"role": "assistant", "content": "  two spaces"}])");
        const auto r = t.render(messages, true);
        const auto ids = sparqlab::text::chatIds(*tokenizer, r);
        QCOMPARE(ids, tokenizer->encode(r.text, false));
        const auto ranges = sparqlab::text::contentTokenRanges(*tokenizer, r);
        QCOMPARE(ranges.size(), size_t{3});
        for (size_t i = 0; i < ranges.size(); ++i) {
            const std::vector<int64_t> part(ids.begin() + ranges[i].first,
                                            ids.begin() + ranges[i].second);
            QCOMPARE(QString::fromStdString(tokenizer->decode(part)),
                     QString::fromStdString(messages[i]["content"].get<std::string>()));
        }
    }

    void deepContextIsRefused() {
        std::string deep;
        for (int i = 0; i < 100000; ++i)
            deep += "[";
        for (int i = 0; i < 100000; ++i)
            deep += "]";
        try {
            jinja::Template::parse("{{ x | length }}", "t.jinja")
                .render(ojson{{"x", ojson::parse(deep)}});
            QFAIL("a context 100,000 deep rendered");
        } catch (const jinja::TemplateError& e) {
            QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("nests more than")),
                     e.what());
        }
    }

    void chatTemplateFromAFolder() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string folder = dir.path().toStdString();
        QVERIFY(!ChatTemplate::fromFolder(folder));
        {
            std::ofstream f(folder + "/tokenizer_config.json");
            f << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": [)"
              << R"({"name": "tool_use", "template": "T"},)"
              << R"({"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"}]})";
        }
        const auto t = ChatTemplate::fromFolder(folder);
        QVERIFY(t);
        const auto r = t->render(sparqlab::text::userConversation("hi there", "be brief"), true);
        QCOMPARE(r.text, std::string("<s>[system]be brief</s>[user]hi there</s>[assistant]"));
        // The content spans: the template's tokens are the rest.
        QCOMPARE(r.content.size(), size_t{2});
        QCOMPARE(r.text.substr(r.content[0].first, r.content[0].second - r.content[0].first),
                 std::string("be brief"));
        QCOMPARE(r.text.substr(r.content[1].first, r.content[1].second - r.content[1].first),
                 std::string("hi there"));
        // chat_template.jinja beside it wins, as in transformers 4.43+.
        {
            std::ofstream f(folder + "/chat_template.jinja");
            f << "J{{ messages | length }}\n";
        }
        QCOMPARE(ChatTemplate::fromFolder(folder)->render(ojson::array(), false).text,
                 std::string("J0"));
    }
};

QTEST_GUILESS_MAIN(TestChatTemplate)
#include "test_chat_template.moc"
