// Bad input at the command line (issue 9): every case makes a broken file or argument from a
// small valid model and capture, runs sparqlab-cli, and expects exit status 1 (2 for usage
// errors) with exactly one line on stderr, `error: …`, that names the file (where there is
// one) and the problem. Nothing is written under an output name when a command fails.

#include "bad_input.h"
#include "test_support.h"

#include "attention/attention.h"
#include "attention/method_table.h"
#include "capture/capture_file.h"
#include "capture/h5.h"
#include "model/model.h"
#include "model/safetensors.h"

#include <ATen/ATen.h>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <functional>
#include <map>

#include <nlohmann/json.hpp>

using sparqlab::test::runCli;
using namespace sparqlab::test::bad_input;

namespace {

/// A safetensors file with a hand-written header and `data` bytes after it.
QByteArray safetensors(const QByteArray& header, const QByteArray& data) {
    QByteArray out(8, '\0');
    const quint64 n = static_cast<quint64>(header.size());
    for (int i = 0; i < 8; ++i)
        out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + header + data;
}

/// What a case's make() returns, followed by the reference's path, when the reference it copies
/// is not here (tests/data's compact references hold one refs/hf3 folder).
const QString kNeedsReference = QStringLiteral("needs-reference");

} // namespace

class TestBadInput : public QObject {
    Q_OBJECT
    QTemporaryDir m_root;
    QString m_model;   // a valid small model folder (with the demo's tokenizer)
    QString m_capture; // a valid capture of it

    QList<Case> cases() const {
        const QString model = m_model, capture = m_capture;
        auto info = [](const QString& m) { return QStringList{"info", "--model", m}; };
        auto logitsOf = [](const QString& m) {
            return QStringList{"logits", "--model", m, "--ids", "1,2,3", "--out", m + "/out.h5"};
        };
        // Replaces the model's weights by `bytes`, then asks for logits.
        auto weights = [=](QByteArray bytes) {
            return [=](const QString& dir) {
                const QString m = copyModel(model, dir);
                writeAll(m + "/model.safetensors", bytes);
                return logitsOf(m);
            };
        };
        // Replaces config.json (or tokenizer.json) by `text`.
        auto file = [=](QString name, QByteArray text, bool textCommand) {
            return [=](const QString& dir) {
                const QString m = copyModel(model, dir);
                writeAll(m + "/" + name, text);
                return textCommand ? QStringList{"tokenize", "--model", m, "--text", "hello"}
                                   : info(m);
            };
        };
        const QByteArray good = readAll(model + "/model.safetensors");
        const QByteArray f8 = QByteArray(8 * 4, '\0');
        QByteArray nanWeights = good, infWeights = good;
        {
            // The first tensor's data starts right after the header: poison its first float.
            const quint64 n = *reinterpret_cast<const quint64*>(good.constData());
            const int at = static_cast<int>(8 + n);
            const float nan = std::numeric_limits<float>::quiet_NaN();
            const float inf = std::numeric_limits<float>::infinity();
            nanWeights.replace(at, 4, reinterpret_cast<const char*>(&nan), 4);
            infWeights.replace(at, 4, reinterpret_cast<const char*>(&inf), 4);
        }
        QByteArray deep(100000, '[');
        deep += QByteArray(100000, ']');
        QList<Case> c;
        // --- safetensors ---
        c << Case{"empty weights file", weights(QByteArray()), 1, {"model.safetensors"}};
        c << Case{"weights shorter than 8 bytes", weights("abc"), 1, {"model.safetensors"}};
        c << Case{"weights truncated in the data",
                  weights(good.left(good.size() / 2)),
                  1,
                  {"model.safetensors"}};
        c << Case{"header length beyond the file",
                  weights(QByteArray("\xff\xff\xff\x00\x00\x00\x00\x00{}", 10)),
                  1,
                  {"model.safetensors", "header"}};
        c << Case{"header malformed JSON",
                  weights(safetensors("{\"a\": ", "")),
                  1,
                  {"model.safetensors"}};
        c << Case{
            "header not an object", weights(safetensors("[1, 2]", "")), 1, {"model.safetensors"}};
        c << Case{
            "unknown dtype",
            weights(safetensors(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", f8)),
            1,
            {"model.safetensors", "Q7"}};
        c << Case{
            "offsets outside the data",
            weights(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})", f8)),
            1,
            {"model.safetensors", "w"}};
        c << Case{"overlapping tensors",
                  weights(safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                      QByteArray(16, '\0'))),
                  1,
                  {"model.safetensors", "overlap"}};
        c << Case{
            "size does not match the shape",
            weights(safetensors(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f8)),
            1,
            {"model.safetensors", "w"}};
        c << Case{
            "negative shape",
            weights(safetensors(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f8)),
            1,
            {"model.safetensors", "w"}};
        c << Case{"NaN weights", weights(nanWeights), 1, {"model.safetensors", "finite"}};
        c << Case{"infinite weights", weights(infWeights), 1, {"model.safetensors", "finite"}};
        c << Case{
            "a weight missing",
            weights(safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f8)),
            1,
            {"model.safetensors", "model.embed_tokens.weight"}};
        c << Case{"missing shard",
                  [=](const QString& dir) {
                      const QString m = copyModel(model, dir);
                      QFile::remove(m + "/model.safetensors");
                      writeAll(m + "/model.safetensors.index.json",
                               R"({"weight_map": {"lm_head.weight": "model-00002.safetensors"}})");
                      return logitsOf(m);
                  },
                  1,
                  {"model-00002.safetensors"}};
        c << Case{"shard index malformed",
                  [=](const QString& dir) {
                      const QString m = copyModel(model, dir);
                      QFile::remove(m + "/model.safetensors");
                      writeAll(m + "/model.safetensors.index.json", "{\"weight_map\": [");
                      return logitsOf(m);
                  },
                  1,
                  {"model.safetensors.index.json"}};
        c << Case{"no weights at all",
                  [=](const QString& dir) {
                      const QString m = copyModel(model, dir);
                      QFile::remove(m + "/model.safetensors");
                      return logitsOf(m);
                  },
                  1,
                  {"safetensors"}};
        // --- config.json ---
        c << Case{"config malformed JSON",
                  file("config.json", "{\"hidden_size\": ", false),
                  1,
                  {"config.json"}};
        c << Case{"config not an object", file("config.json", "[]", false), 1, {"config.json"}};
        c << Case{"config without architectures",
                  file("config.json", "{\"hidden_size\": 64}", false),
                  1,
                  {"config.json", "architectures"}};
        c << Case{"unsupported architecture",
                  file("config.json", R"({"architectures": ["MambaForCausalLM"]})", false),
                  1,
                  {"config.json", "MambaForCausalLM"}};
        c << Case{"config key of the wrong type",
                  file("config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "wide"})", false),
                  1,
                  {"config.json", "hidden_size"}};
        c << Case{"heads do not divide the width",
                  file("config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
                       R"("num_attention_heads": 5, "num_hidden_layers": 1, "vocab_size": 10, )"
                       R"("intermediate_size": 8})",
                       false),
                  1,
                  {"config.json"}};
        c << Case{"zero layers",
                  file("config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
                       R"("num_attention_heads": 4, "num_hidden_layers": 0, "vocab_size": 10, )"
                       R"("intermediate_size": 8})",
                       false),
                  1,
                  {"config.json"}};
        // Fields that contradict each other or the weights (issue 24).
        c << Case{"config head_dim contradicts q_proj",
                  [=](const QString& dir) {
                      const QString m = copyModel(model, dir);
                      writeAll(
                          m + "/config.json",
                          R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
                          R"("intermediate_size": 96, "num_hidden_layers": 2, )"
                          R"("num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, )"
                          R"("vocab_size": 4096, "max_position_embeddings": 256})");
                      return logitsOf(m);
                  },
                  1,
                  {"config.json", "'head_dim'", "q_proj"}};
        c << Case{"config sliding_window_pattern of 0",
                  file("config.json",
                       R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64, )"
                       R"("num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, )"
                       R"("intermediate_size": 8, "head_dim": 16, "sliding_window_pattern": 0})",
                       false),
                  1,
                  {"config.json", "'sliding_window_pattern'"}};
        c << Case{
            "config unknown rope_scaling type",
            file("config.json",
                 R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
                 R"("num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, )"
                 R"("intermediate_size": 8, "rope_scaling": {"rope_type": "bogus", "factor": 2}})",
                 false),
            1,
            {"config.json", "'rope_scaling.rope_type'", "bogus"}};
        // A base of 1 or below made every angle NaN: a capture of NaN written with exit 0.
        c << Case{"config rope_theta below 1",
                  file("config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
                       R"("num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, )"
                       R"("intermediate_size": 8, "rope_theta": -1})",
                       false),
                  1,
                  {"config.json", "'rope_theta'", "above 1"}};
        c << Case{"config rope_parameters.rope_theta of 0",
                  file("config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
                       R"("num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, )"
                       R"("intermediate_size": 8, "rope_parameters": {"rope_type": "default", )"
                       R"("rope_theta": 0}})",
                       false),
                  1,
                  {"config.json", "'rope_parameters.rope_theta'"}};
        c << Case{"config negative rms_norm_eps",
                  file("config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, )"
                       R"("num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, )"
                       R"("intermediate_size": 8, "rms_norm_eps": -0.5})",
                       false),
                  1,
                  {"config.json", "'rms_norm_eps'"}};
        c << Case{"config longrope factors of the wrong length",
                  file("config.json",
                       R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 64, )"
                       R"("num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, )"
                       R"("intermediate_size": 8, "rope_scaling": {"type": "longrope", )"
                       R"("short_factor": [1, 1], "long_factor": [1, 1, 1, 1, 1, 1, 1, 1]}})",
                       false),
                  1,
                  {"config.json", "'rope_scaling.short_factor'"}};
        c << Case{
            "config vision-language folder without text_config",
            file("config.json", R"({"architectures": ["Gemma3ForConditionalGeneration"]})", false),
            1,
            {"config.json", "'text_config'"}};
        c << Case{
            "config layer_types of the wrong length",
            file("config.json",
                 R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 64, )"
                 R"("num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, )"
                 R"("intermediate_size": 8, "head_dim": 16, "layer_types": ["full_attention"]})",
                 false),
            1,
            {"config.json", "'layer_types'"}};
        c << Case{"config deeply nested", file("config.json", deep, false), 1, {"config.json"}};
        c << Case{"config number out of range",
                  file("config.json",
                       R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 1e400})", false),
                  1,
                  {"config.json"}};
        c << Case{"model beyond the memory available",
                  [=](const QString& dir) {
                      const QString m = copyModel(model, dir);
                      writeAll(m + "/config.json",
                               R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 65536, )"
                               R"("intermediate_size": 262144, "num_hidden_layers": 200, )"
                               R"("num_attention_heads": 512, "vocab_size": 32000})");
                      return logitsOf(m);
                  },
                  1,
                  {"config.json", "MiB are available"}};
        c << Case{"config.json missing",
                  [=](const QString& dir) {
                      const QString m = copyModel(model, dir);
                      QFile::remove(m + "/config.json");
                      return info(m);
                  },
                  1,
                  {"config.json"}};
        c << Case{"model folder missing",
                  [](const QString& dir) {
                      return QStringList{"info", "--model", dir + "/none"};
                  },
                  1,
                  {"none"}};
        // --- tokenizer.json ---
        c << Case{"tokenizer malformed JSON",
                  file("tokenizer.json", "{\"model\": {", true),
                  1,
                  {"tokenizer.json"}};
        c << Case{"tokenizer without a model",
                  file("tokenizer.json", "{\"version\": \"1.0\"}", true),
                  1,
                  {"tokenizer.json", "model"}};
        c << Case{"tokenizer of an unknown type",
                  file("tokenizer.json", R"({"model": {"type": "Quantum", "vocab": {}}})", true),
                  1,
                  {"tokenizer.json", "Quantum"}};
        c << Case{
            "tokenizer deeply nested", file("tokenizer.json", deep, true), 1, {"tokenizer.json"}};
        c << Case{"tokenizer missing for text",
                  [=](const QString& dir) {
                      const QString m = copyModel(model, dir);
                      QFile::remove(m + "/tokenizer.json");
                      return QStringList{"tokenize", "--model", m, "--text", "hi"};
                  },
                  1,
                  {"tokenizer"}};
        c << sparqlab::test::bad_input::chatTemplateCases(model);
        // --- prompts and attention parameters ---
        c << Case{"empty prompt",
                  [=](const QString&) {
                      return QStringList{"generate", "--model",          model, "--prompt",
                                         "",         "--max-new-tokens", "2"};
                  },
                  1,
                  {"empty"}};
        c << Case{"prompt beyond the context",
                  [=](const QString& dir) {
                      QStringList ids;
                      for (int i = 0; i < 300; ++i)
                          ids << QString::number(i % 50);
                      return QStringList{"capture",     "--model", model,        "--ids",
                                         ids.join(','), "--out",   dir + "/c.h5"};
                  },
                  1,
                  {"context"}};
        c << Case{"token id outside the vocabulary",
                  [=](const QString& dir) {
                      return QStringList{"logits",   "--model", model,        "--ids",
                                         "1,999999", "--out",   dir + "/l.h5"};
                  },
                  1,
                  {"999999"}};
        c << Case{"ids file not an array",
                  [=](const QString& dir) {
                      writeAll(dir + "/ids.json", "{\"ids\": 1}");
                      return QStringList{"logits",          "--model", model,        "--ids-file",
                                         dir + "/ids.json", "--out",   dir + "/l.h5"};
                  },
                  1,
                  {"ids.json"}};
        c << Case{"prompts file with a malformed line",
                  [=](const QString& dir) {
                      writeAll(dir + "/p.jsonl", "{\"text\": \"fine\"}\n{\"text\": \n");
                      return QStringList{"capture",        "--model",        model,
                                         "--prompts-file", dir + "/p.jsonl", "--out",
                                         dir + "/c.h5"};
                  },
                  1,
                  {"p.jsonl", "2"}};
        c << Case{"r beyond head_dim in generate",
                  [=](const QString&) {
                      return QStringList{
                          "generate", "--model",  model,   "--ids", "1,2", "--max-new-tokens",
                          "1",        "--method", "sparq", "--r",   "1000"};
                  },
                  1,
                  {"r"}};
        c << Case{"k of zero in attend",
                  [=](const QString& dir) {
                      return QStringList{"attend", "--capture", capture,      "--method",
                                         "sparq",  "--r",       "4",          "--k",
                                         "0",      "--out",     dir + "/a.h5"};
                  },
                  2,
                  {"--k"}};
        // METHODS.md §1.4 through the command line, and the calibration files.
        auto attendWith = [=](QStringList extra) {
            return [=](const QString& dir) {
                return QStringList{"attend", "--capture", capture, "--out", dir + "/a.h5"} + extra;
            };
        };
        c << Case{"snapkv capture without the window's queries",
                  attendWith({"--method", "snapkv", "--k", "4", "--window", "2"}),
                  1,
                  {"cap.h5", "snapkv", "--all-queries"}};
        c << Case{"tova capture without consecutive queries",
                  attendWith({"--method", "tova", "--k", "4"}),
                  1,
                  {"cap.h5", "tova", "--all-queries"}};
        c << Case{"top-p mass above 1",
                  attendWith({"--method", "oracle-top-p", "--p", "1.5"}),
                  2,
                  {"--p"}};
        c << Case{"even pooling kernel", // (the table's rule: refused as the option is read)
                  attendWith({"--method", "snapkv", "--k", "4", "--window", "2", "--kernel", "4"}),
                  2,
                  {"--kernel", "odd"}};
        c << Case{"adakv window above k",
                  attendWith({"--method", "adakv", "--k", "4", "--window", "5"}),
                  1,
                  {"--window", "--k (4)"}};
        c << Case{"page size zero",
                  attendWith({"--method", "quest", "--page-size", "0"}),
                  2,
                  {"--page-size"}};
        c << Case{"unknown pooling",
                  attendWith({"--method", "snapkv", "--pooling", "median"}),
                  2,
                  {"--pooling", "median"}};
        c << Case{
            "loki without a basis", attendWith({"--method", "loki", "--r", "4"}), 1, {"--basis"}};
        c << sparqlab::test::bad_input::methods23Cases(capture);
        // --- eval data and results (issue 25) ---
        auto evalWith = [=](QString task, QString name, QByteArray content) {
            return [=](const QString& dir) {
                writeAll(dir + "/" + name, content);
                return QStringList{"eval",           "--model", model,
                                   "--task",         task,      "--data",
                                   dir + "/" + name, "--out",   dir + "/r.jsonl",
                                   "--methods",      "dense"};
            };
        };
        c << Case{"eval SQuAD file with malformed JSON",
                  evalWith("squad", "squad.json", "{\"data\": [{\"title\": \"T\""),
                  1,
                  {"squad.json", "malformed JSON"}};
        c << Case{"eval SQuAD question without answers",
                  evalWith("squad", "squad.jsonl",
                           "{\"id\": \"1\", \"title\": \"T\", \"context\": \"c\", "
                           "\"question\": \"q\"}\n"),
                  1,
                  {"squad.jsonl line 1", "\"answers\""}};
        c << sparqlab::test::bad_input::rulerCases(model);
        c << Case{"eval CNN/DailyMail line without highlights",
                  evalWith("cnndm", "cnn.jsonl", "{\"article\": \"text\"}\n"),
                  1,
                  {"cnn.jsonl line 1", "\"highlights\""}};
        c << Case{
            "eval TriviaQA row without aliases",
            evalWith("triviaqa", "tqa.json", "[{\"question\": \"q\", \"question_id\": \"1\"}]"),
            1,
            {"tqa.json", "aliases"}};
        c << Case{"eval bpc JSONL line without text",
                  evalWith("bpc", "b.jsonl", "{\"txt\": \"x\"}\n"),
                  1,
                  {"b.jsonl line 1", "\"text\""}};
        c << Case{"eval data file missing",
                  [=](const QString& dir) {
                      return QStringList{
                          "eval",   "--model",         model,   "--task",        "bpc",
                          "--data", dir + "/none.txt", "--out", dir + "/r.jsonl"};
                  },
                  1,
                  {"none.txt", "cannot read"}};
        c << Case{"eval resume over a file that is not eval output",
                  [=](const QString& dir) {
                      writeAll(dir + "/t.txt", "Some text to score, long enough for it.\n");
                      writeAll(dir + "/r.jsonl", "not an eval line\n");
                      return QStringList{
                          "eval",   "--model",      model,   "--task",         "bpc",
                          "--data", dir + "/t.txt", "--out", dir + "/r.jsonl", "--resume"};
                  },
                  1,
                  {"r.jsonl line 1", "resume"}};
        c << Case{"eval resume over another model's results",
                  [=](const QString& dir) {
                      writeAll(dir + "/t.txt", "Some text to score, long enough for it.\n");
                      writeAll(dir + "/r.jsonl",
                               "{\"task\": \"bpc\", \"data\": \"t.txt\", \"example\": \"0\", "
                               "\"method\": \"dense\", \"model\": \"another-model\"}\n");
                      return QStringList{
                          "eval",   "--model",      model,   "--task",         "bpc",
                          "--data", dir + "/t.txt", "--out", dir + "/r.jsonl", "--resume"};
                  },
                  1,
                  {"r.jsonl line 1", "results of model 'another-model'", "same model"}};
#if SPARQLAB_TEST_HAS_GUI
        c << Case{
            "figures from an eval file with a bad line",
            [=](const QString& dir) {
                writeAll(dir + "/r.jsonl", "{\"task\": \"squad\"}\n");
                return QStringList{"figures", "--eval", dir + "/r.jsonl", "--out", dir + "/f"};
            },
            1,
            {"r.jsonl line 1"}};
#endif
        c << Case{"calibrate a method without calibration",
                  [=](const QString& dir) {
                      return QStringList{"calibrate", "--capture", capture,      "--method",
                                         "sparq",     "--out",     dir + "/c.h5"};
                  },
                  2,
                  {"--method", "sparq"}};
        c << Case{"double-sparsity calibration without every query",
                  [=](const QString& dir) {
                      return QStringList{"calibrate",       "--capture", capture,      "--method",
                                         "double-sparsity", "--out",     dir + "/c.h5"};
                  },
                  1,
                  {"cap.h5", "--all-queries"}};
        c << Case{"a capture given as a basis",
                  attendWith({"--method", "loki", "--r", "4", "--basis", capture}),
                  1,
                  {"cap.h5", "calibration"}};
        // Calibration files made by hand, broken one way each.
        auto calibration = [=](std::function<void(const sparqlab::h5::Group&)> fill) {
            return [=](const QString& dir) {
                const QString f = dir + "/cal.h5";
                sparqlab::h5::File out = sparqlab::h5::File::create(f.toStdString());
                bool ds = false; // a Double Sparsity file (its fill says so), else Loki's
                {
                    const sparqlab::h5::Group root = out.root();
                    root.setAttr("format", "sparqlab.calibration");
                    root.setAttr("format_version", int64_t{1});
                    root.setAttr("model", "small");
                    root.setAttr("n_layers", int64_t{2});
                    root.setAttr("n_heads", int64_t{4});
                    root.setAttr("n_kv_heads", int64_t{2});
                    root.setAttr("head_dim", int64_t{16});
                    fill(root);
                    ds = root.hasAttribute("method") &&
                         root.attrString("method") == "double-sparsity";
                } // (closed before commit)
                out.commit();
                return QStringList{"attend",
                                   "--capture",
                                   capture,
                                   "--out",
                                   dir + "/a.h5",
                                   "--r",
                                   "4",
                                   "--method",
                                   ds ? "double-sparsity" : "loki",
                                   ds ? "--channels" : "--basis",
                                   f};
            };
        };
        c << Case{"basis whose string attribute's heap loops libhdf5 (fuzz_calibration)",
                  [=](const QString& dir) {
                      const QString f = dir + "/cal.h5";
                      QFile::copy(sparqlab::test::sourcePath(QStringLiteral(
                                      "tests/fuzz/corpus/calibration/regression-hang-vlen-heap")),
                                  f);
                      return QStringList{"attend",      "--capture", capture, "--out",
                                         dir + "/a.h5", "--r",       "4",     "--method",
                                         "loki",        "--basis",   f};
                  },
                  1,
                  {"cal.h5", "corrupt"}};
        c << Case{"basis of the wrong shape",
                  calibration([](const sparqlab::h5::Group& r) {
                      r.setAttr("method", "loki");
                      r.write("basis", at::zeros({2, 2, 16, 8}));
                      r.write("eigenvalues", at::zeros({2, 2, 16}));
                  }),
                  1,
                  {"cal.h5", "basis"}};
        c << Case{"basis with NaN",
                  calibration([](const sparqlab::h5::Group& r) {
                      r.setAttr("method", "loki");
                      r.write("basis", at::full({2, 2, 16, 16}, std::nan("")));
                      r.write("eigenvalues", at::zeros({2, 2, 16}));
                  }),
                  1,
                  {"cal.h5", "NaN"}};
        c << Case{"channel index out of range",
                  calibration([](const sparqlab::h5::Group& r) {
                      r.setAttr("method", "double-sparsity");
                      r.write("channels", at::full({2, 4, 16}, 16, at::kLong));
                  }),
                  1,
                  {"cal.h5", "channel"}};
        c << Case{"calibration from another model",
                  calibration([](const sparqlab::h5::Group& r) {
                      r.setAttr("method", "loki");
                      r.setAttr("n_layers", int64_t{3});
                      r.write("basis", at::zeros({3, 2, 16, 16}));
                      r.write("eigenvalues", at::zeros({3, 2, 16}));
                  }),
                  1,
                  {"cal.h5", "layers"}};
        c << Case{"negative temperature",
                  [=](const QString& dir) {
                      return QStringList{"attend", "--capture", capture, "--method",   "sparq",
                                         "--tau",  "-1",        "--out", dir + "/a.h5"};
                  },
                  2,
                  {"tau"}};
        c << Case{"unknown method",
                  [=](const QString& dir) {
                      return QStringList{"attend", "--capture", capture,      "--method",
                                         "magic",  "--out",     dir + "/a.h5"};
                  },
                  2,
                  {"magic"}};
        // --- HDF5 captures ---
        c << Case{
            "capture that is not HDF5",
            [](const QString& dir) {
                writeAll(dir + "/x.h5", "this is not HDF5");
                return QStringList{"stats", "--capture", dir + "/x.h5", "--json", dir + "/s.json"};
            },
            1,
            {"x.h5"}};
        c << Case{
            "HDF5 file that is no capture",
            [=](const QString& dir) {
                runCli({"logits", "--model", model, "--ids", "1,2", "--out", dir + "/l.h5"});
                return QStringList{"stats", "--capture", dir + "/l.h5", "--json", dir + "/s.json"};
            },
            1,
            {"l.h5", "format"}};
        c << Case{"capture of a future version",
                  [](const QString& dir) {
                      auto f = sparqlab::h5::File::create((dir + "/v.h5").toStdString());
                      f.root().setAttr("format", "sparqlab.capture");
                      f.root().setAttr("format_version", int64_t{99});
                      f.commit();
                      return QStringList{"attend", "--capture", dir + "/v.h5", "--method",
                                         "dense",  "--out",     dir + "/a.h5"};
                  },
                  1,
                  {"v.h5", "99"}};
        c << Case{"truncated capture",
                  [=](const QString& dir) {
                      writeAll(dir + "/t.h5", readAll(capture).left(readAll(capture).size() / 2));
                      return QStringList{"attend", "--capture", dir + "/t.h5", "--method",
                                         "dense",  "--out",     dir + "/a.h5"};
                  },
                  1,
                  {"t.h5"}};
        c << Case{"capture that overflows libhdf5 (fuzzer find)",
                  [](const QString& dir) {
                      return QStringList{"attend",
                                         "--capture",
                                         sparqlab::test::sourcePath(
                                             QStringLiteral("tests/fuzz/corpus/capture/"
                                                            "regression-hdf5-attr-exists.h5")),
                                         "--method",
                                         "dense",
                                         "--out",
                                         dir + "/a.h5"};
                  },
                  1,
                  {"regression-hdf5-attr-exists.h5"}};
        c << Case{"capture missing",
                  [](const QString& dir) {
                      return QStringList{"stats", "--capture", dir + "/gone.h5", "--json",
                                         dir + "/s.json"};
                  },
                  1,
                  {"gone.h5"}};
        c << Case{"bench r beyond head_dim",
                  [](const QString&) {
                      return QStringList{"bench", "--r", "129"};
                  },
                  2,
                  {"--r"}};
        // Lab sessions (File > Save Session), read by `sparqlab-cli session` and the lab alike:
        // the capture of a valid session with one thing wrong in its /session group.
        using Attrs = std::map<std::string, std::string>;
        auto session = [capture = m_capture](
                           std::function<void(Attrs&, std::map<std::string, int64_t>&)> edit,
                           int prompts = 1) {
            return [=](const QString& dir) {
                namespace att = sparqlab::attention;
                Attrs text{{"format", "sparqlab.session"},
                           {"model", "small"},
                           {"prompt", "x"},
                           {"generated", ""},
                           {"method", "sparq"},
                           {"measure", "coverage (top-k mass)"},
                           {"compare_method", "quest"},
                           {"timing", ""}};
                att::AttentionConfig def;
                def.r = 4;
                def.k = 4;
                for (const att::ParamInfo& p : att::parameters())
                    if (p.id != att::Param::Basis && p.id != att::Param::Channels)
                        text[p.attribute] = att::paramValue(def, p.id);
                std::map<std::string, int64_t> ints{{"format_version", 1}, {"layer", 0},
                                                    {"head", 0},           {"view", 0},
                                                    {"step", -1},          {"prompt_positions", 0}};
                edit(text, ints);
                const sparqlab::capture::CaptureReader in(capture.toStdString());
                const QString f = dir + "/s.h5";
                sparqlab::capture::CaptureWriter out(f.toStdString(), in.info());
                for (int i = 0; i < prompts; ++i)
                    out.add(in.read(0));
                {
                    const sparqlab::h5::Group g = out.root().createGroup("session");
                    for (const auto& [k, v] : text)
                        g.setAttr(k, v);
                    for (const auto& [k, v] : ints)
                        g.setAttr(k, v);
                } // (closed before the file is finished)
                out.finish();
                return QStringList{"session", f};
            };
        };
        using Ints = std::map<std::string, int64_t>;
        c << Case{"session: an unknown method",
                  session([](Attrs& t, Ints&) { t["method"] = "sparkle"; }),
                  1,
                  {"s.h5", "sparkle"}};
        c << Case{"session: a layer the capture lacks",
                  session([](Attrs&, Ints& i) { i["layer"] = 99; }),
                  1,
                  {"s.h5", "layer 99"}};
        c << Case{"session: r above head_dim",
                  session([](Attrs& t, Ints&) { t["r"] = "999"; }),
                  1,
                  {"s.h5", "r"}};
        c << Case{"session: k that is not a number",
                  session([](Attrs& t, Ints&) { t["k"] = "many"; }),
                  1,
                  {"s.h5", "'k'", "many"}};
        c << Case{"session: an attribute missing",
                  session([](Attrs& t, Ints&) { t.erase("prompt"); }),
                  1,
                  {"s.h5", "'prompt' is missing"}};
        c << Case{"session: a newer format version",
                  session([](Attrs&, Ints& i) { i["format_version"] = 9; }),
                  1,
                  {"s.h5", "format_version 9"}};
        c << Case{"session: not a session format",
                  session([](Attrs& t, Ints&) { t["format"] = "something.else"; }),
                  1,
                  {"s.h5", "something.else"}};
        c << Case{"session: a decode step without generated tokens",
                  session([](Attrs&, Ints& i) { i["step"] = 5; }),
                  1,
                  {"s.h5", "step 5"}};
        c << Case{"session: a query position after the last",
                  session([](Attrs&, Ints& i) { i["query_position"] = 4000; }),
                  1,
                  {"s.h5", "query_position 4000"}};
        c << Case{"session: a negative query position",
                  session([](Attrs&, Ints& i) { i["query_position"] = -7; }),
                  1,
                  {"s.h5", "query_position -7"}};
        c << Case{"session: more prompt positions than positions",
                  session([](Attrs&, Ints& i) { i["prompt_positions"] = 100; }),
                  1,
                  {"s.h5", "prompt_positions 100"}};
        c << Case{
            "session of two prompts", session([](Attrs&, Ints&) {}, 2), 1, {"s.h5", "one prompt"}};
        c << Case{"session whose chunks are larger than its dataset (fuzz_session)",
                  [](const QString& dir) {
                      const QString f = dir + "/s.h5";
                      QFile::copy(sparqlab::test::sourcePath(
                                      QStringLiteral("tests/fuzz/corpus/session/"
                                                     "regression-chunk-larger-than-dataset")),
                                  f);
                      return QStringList{"session", f};
                  },
                  1,
                  {"s.h5", "chunk"}};
        c << Case{"session: a truncated file",
                  [=](const QString& dir) {
                      const QString f = dir + "/s.h5";
                      QStringList args = session([](Attrs&, Ints&) {})(dir);
                      QByteArray bytes = readAll(f);
                      bytes.truncate(bytes.size() / 2);
                      writeAll(f, bytes);
                      return args;
                  },
                  1,
                  {"s.h5"}};
        // --- the 2025–26 families (refs/hf3 folders, copied and broken) ---
        using Tensors = std::map<std::string, at::Tensor>;
        // Copies refs/hf3/<arch>, edits its config.json and its tensors, asks for logits.
        auto hf3 = [=](QString arch, std::function<void(nlohmann::json&)> editConfig,
                       std::function<void(Tensors&)> editWeights) {
            return [=](const QString& dir) {
                const QString config = QStringLiteral("refs/hf3/%1/config.json").arg(arch);
                if (sparqlab::test::sharedFile(config).isEmpty())
                    return QStringList{kNeedsReference, config};
                const QString m = copyModel(
                    sparqlab::test::sharedDir() + QStringLiteral("/refs/hf3/") + arch, dir);
                QFile::remove(m + "/golden.h5");
                if (editConfig) {
                    nlohmann::json j =
                        nlohmann::json::parse(readAll(m + "/config.json").toStdString());
                    editConfig(j);
                    writeAll(m + "/config.json", QByteArray::fromStdString(j.dump(1)));
                }
                if (editWeights) {
                    const sparqlab::model::Checkpoint ck(m.toStdString());
                    Tensors t;
                    for (const std::string& n : ck.names())
                        t[n] = ck.load(n, at::kFloat, ck.shapeOf(n));
                    editWeights(t);
                    sparqlab::model::writeSafetensors(
                        (m + "/model.safetensors").toStdString(),
                        std::vector<std::pair<std::string, at::Tensor>>(t.begin(), t.end()));
                }
                return logitsOf(m);
            };
        };
        c << Case{"config: unknown rope_type in rope_parameters",
                  hf3("qwen3_moe",
                      [](nlohmann::json& j) { j["rope_parameters"]["rope_type"] = "dynamic2"; },
                      {}),
                  1,
                  {"config.json", "rope_parameters.rope_type", "dynamic2", "yarn"}};
        c << Case{"config: no_rope_layers of the wrong length",
                  hf3("smollm3",
                      [](nlohmann::json& j) {
                          j["no_rope_layers"] = {1, 0, 1};
                      },
                      {}),
                  1,
                  {"config.json", "no_rope_layers", "4"}};
        c << Case{"config: no_rope_layers holding a 2",
                  hf3("smollm3",
                      [](nlohmann::json& j) {
                          j["no_rope_layers"] = {1, 0, 2, 0};
                      },
                      {}),
                  1,
                  {"config.json", "no_rope_layers"}};
        c << Case{"config: n_group not dividing the experts",
                  hf3("deepseek_v3", [](nlohmann::json& j) { j["n_group"] = 3; }, {}),
                  1,
                  {"config.json", "n_group"}};
        c << Case{
            "config: a layer kind no family has",
            hf3("gpt_oss", [](nlohmann::json& j) { j["layer_types"][1] = "linear_attention"; }, {}),
            1,
            {"config.json", "layer_types"}};
        c << Case{"config: a yarn factor of zero",
                  hf3("gpt_oss", [](nlohmann::json& j) { j["rope_parameters"]["factor"] = 0; }, {}),
                  1,
                  {"config.json", "factor"}};
        c << Case{"weights: an expert's tensor missing",
                  hf3("qwen3_moe", {},
                      [](Tensors& t) { t.erase("model.layers.2.mlp.experts.5.up_proj.weight"); }),
                  1,
                  {"model.safetensors", "model.layers.2.mlp.experts.5.up_proj.weight"}};
        c << Case{"weights: the router of the wrong shape",
                  hf3("qwen3_moe", {},
                      [](Tensors& t) {
                          at::Tensor& r = t["model.layers.0.mlp.gate.weight"];
                          r = r.narrow(0, 0, 7).contiguous();
                      }),
                  1,
                  {"model.safetensors", "model.layers.0.mlp.gate.weight"}};
        c << Case{"weights: fused experts of the wrong shape",
                  hf3("gpt_oss", {},
                      [](Tensors& t) {
                          at::Tensor& g = t["model.layers.1.mlp.experts.gate_up_proj"];
                          g = g.narrow(2, 0, 64).contiguous();
                      }),
                  1,
                  {"model.safetensors", "model.layers.1.mlp.experts.gate_up_proj"}};
        c << Case{"weights: the attention sinks missing",
                  hf3("gpt_oss", {}, [](Tensors& t) { t.erase("model.layers.3.self_attn.sinks"); }),
                  1,
                  {"model.safetensors", "model.layers.3.self_attn.sinks"}};
        c << Case{"weights: NaN in an expert a token reaches",
                  hf3("deepseek_v3", {},
                      [](Tensors& t) {
                          for (int e = 0; e < 8; ++e) // every expert: whichever is reached
                              t["model.layers.1.mlp.experts." + std::to_string(e) +
                                ".down_proj.weight"][0][0] = NAN;
                      }),
                  1,
                  {"model.safetensors", "expert", "NaN"}};
        c << Case{"session made with a calibration file",
                  [=](const QString& dir) {
                      return QStringList{"session",     "--capture", capture, "--out",
                                         dir + "/s.h5", "--method",  "loki",  "--r",
                                         "4",           "--basis",   capture};
                  },
                  1,
                  {"cap.h5"}};
        c << sparqlab::test::bad_input::cliCases(model, capture);
        return c;
    }

private Q_SLOTS:
    void initTestCase() {
        QVERIFY(m_root.isValid());
        const auto demo = sparqlab::model::Model::open("demo");
        writeAll(
            m_root.filePath("small.json"),
            R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96, )"
            R"("num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, )"
            R"("vocab_size": 4096, "max_position_embeddings": 256})");
        m_model = m_root.filePath("small");
        auto r =
            runCli({"init-model", "--config", m_root.filePath("small.json"), "--out", m_model,
                    "--tokenizer", QString::fromStdString(demo->folder() + "/tokenizer.json")});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
        m_capture = m_root.filePath("cap.h5");
        r = runCli(
            {"capture", "--model", m_model, "--ids", "5,6,7,8,9,10,11,12", "--out", m_capture});
        QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    }

    void oneLineErrorNamingTheFile_data() {
        QTest::addColumn<int>("index");
        const QList<Case> all = cases();
        QVERIFY(all.size() >= 55);
        for (int i = 0; i < all.size(); ++i)
            QTest::newRow(qPrintable(all[i].name)) << i;
    }

    void oneLineErrorNamingTheFile() {
        QFETCH(int, index);
        const Case c = cases()[index];
        const QString dir = m_root.filePath(QStringLiteral("case%1").arg(index));
        QDir().mkpath(dir);
        const QStringList args = c.make(dir);
        if (args.value(0) == kNeedsReference)
            SPARQLAB_SKIP_UNLESS(false, args.value(1));
        const auto before = QDir(dir).entryList(QDir::Files);
        const auto r = runCli(args);
        QVERIFY2(r.exitCode == c.exitCode, qPrintable(QStringLiteral("exit %1 (want %2): %3")
                                                          .arg(r.exitCode)
                                                          .arg(c.exitCode)
                                                          .arg(r.err)));
        const QString err = r.err.trimmed();
        QVERIFY2(err.startsWith(QStringLiteral("error: ")), qPrintable(err));
        QVERIFY2(!err.contains(QLatin1Char('\n')), qPrintable("more than one line: " + err));
        for (const QString& s : c.mustContain)
            QVERIFY2(err.contains(s, Qt::CaseInsensitive),
                     qPrintable(QStringLiteral("'%1' not in: %2").arg(s, err)));
        // Nothing half-written: no output file appeared, no temporary left behind.
        const auto after = QDir(dir).entryList(QDir::Files);
        for (const QString& f : after)
            QVERIFY2(before.contains(f), qPrintable("left behind: " + f));
    }

    /// SIGKILL in the middle of a large capture: the file of that name from before is intact
    /// and nothing else appears under the name.
    void killDuringCaptureLeavesThePreviousFile() {
        QTemporaryDir dir;
        const QString out = dir.filePath(QStringLiteral("cap.h5"));
        QVERIFY(QFile::copy(m_capture, out));
        const QByteArray before = readAll(out);
        // Enough work to be caught in the middle: 400 prompts of 200 tokens.
        QFile prompts(dir.filePath(QStringLiteral("p.jsonl")));
        QVERIFY(prompts.open(QIODevice::WriteOnly));
        for (int i = 0; i < 400; ++i) {
            QStringList ids;
            for (int t = 0; t < 200; ++t)
                ids << QString::number((i * 7 + t * 13) % 4000);
            prompts.write("{\"ids\": [" + ids.join(',').toUtf8() + "]}\n");
        }
        prompts.close();
        QProcess p;
        p.start(sparqlab::test::cliPath(), {"capture", "--model", m_model, "--prompts-file",
                                            prompts.fileName(), "--out", out});
        QVERIFY(p.waitForStarted());
        // Wait until the capture is being written (its temporary file exists), then kill.
        bool writing = false;
        for (int i = 0; i < 600 && !writing; ++i) {
            QTest::qWait(50);
            for (const QString& f : QDir(dir.path()).entryList(QDir::Files))
                writing = writing || f.startsWith(QStringLiteral("cap.h5.tmp"));
            QVERIFY2(p.state() == QProcess::Running, "the capture ended before it could be killed");
        }
        QVERIFY(writing);
        QTest::qWait(300);
        p.kill(); // SIGKILL
        QVERIFY(p.waitForFinished());
        QCOMPARE(p.exitStatus(), QProcess::CrashExit);
        QCOMPARE(readAll(out), before); // the previous capture, byte for byte
        sparqlab::capture::CaptureReader reader(out.toStdString());
        QCOMPARE(reader.count(), int64_t{1});
    }
};

QTEST_GUILESS_MAIN(TestBadInput)
#include "test_bad_input.moc"
