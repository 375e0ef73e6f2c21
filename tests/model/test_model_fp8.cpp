// fp8 block-quantized checkpoints (quantization_config "fp8", as DeepSeek-V3, Qwen3-FP8 and
// MiniMax-M2 are published): every float8 byte against its format, dequantization block by block
// against a float64 reference rounded as transformers rounds (float32 product, then the weights'
// dtype), and a quantized model against the same model written with its dequantized weights,
// which must compute identical logits. MXFP4 checkpoints (quantization_config "mxfp4", as gpt-oss
// is published) the same way: blocks and scales decoded against the OCP MX format's bit fields in
// transformers' layout, and a gpt-oss with MXFP4 experts against its decoded weights. Bad
// quantized files and configs are one line each.

#include "test_support.h"

#include "model/expert_keeper.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/transformer.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace sparqlab;
using json = nlohmann::json;

namespace {

/// A tensor as a safetensors file holds it: its dtype name and raw little-endian bytes.
struct Raw {
    std::string name, dtype;
    std::vector<int64_t> shape;
    QByteArray data;
};

/// Writes a .safetensors file byte by byte (the code under test writes no float8).
void writeRaw(const QString& path, const std::vector<Raw>& tensors) {
    json header = json::object();
    uint64_t offset = 0;
    QByteArray data;
    for (const Raw& t : tensors) {
        header[t.name] = {
            {"dtype", t.dtype},
            {"shape", t.shape},
            {"data_offsets", {offset, offset + static_cast<uint64_t>(t.data.size())}}};
        offset += static_cast<uint64_t>(t.data.size());
        data += t.data;
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    QByteArray out(8, '\0');
    for (int i = 0; i < 8; ++i)
        out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xFF);
    QVERIFY(test::writeFile(path, out + QByteArray::fromStdString(h) + data));
}

QByteArray bytesOf(const at::Tensor& t0) {
    const at::Tensor t = t0.contiguous();
    return QByteArray(static_cast<const char*>(t.data_ptr()),
                      static_cast<int>(t.numel() * t.element_size()));
}

Raw rawOf(const std::string& name, const at::Tensor& t) {
    const char* dtype = t.scalar_type() == at::kFloat      ? "F32"
                        : t.scalar_type() == at::kBFloat16 ? "BF16"
                                                           : "F16";
    return {name, dtype, t.sizes().vec(), bytesOf(t)};
}

/// The value of a float8 byte built from its bit fields as float32's own bits (normal values)
/// or as an integer times a power of two (subnormals): the formats as the OCP FP8 and MX
/// specifications define them, written apart from the code under test.
double refFloat8(const std::string& format, uint8_t b) {
    const bool neg = b & 0x80;
    auto bits = [&](uint32_t exponent, uint32_t mantissa, int mantissaBits) {
        const uint32_t u =
            (neg ? 0x80000000u : 0u) | (exponent << 23) | (mantissa << (23 - mantissaBits));
        float f;
        std::memcpy(&f, &u, sizeof f);
        return static_cast<double>(f);
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (format == "F8_E4M3") {
        const uint32_t e = (b >> 3) & 15, m = b & 7;
        if (e == 15 && m == 7)
            return nan;
        if (e == 0)
            return (neg ? -1.0 : 1.0) * m / 8.0 / 64.0; // m/8 · 2^(1−7)
        return bits(e - 7 + 127, m, 3);
    }
    if (format == "F8_E5M2") {
        const uint32_t e = (b >> 2) & 31, m = b & 3;
        if (e == 31)
            return m ? nan : (neg ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
        if (e == 0)
            return (neg ? -1.0 : 1.0) * m / 4.0 / 16384.0; // m/4 · 2^(1−15)
        return bits(e - 15 + 127, m, 2);
    }
    // F8_E8M0: an exponent alone; 2^-127 is a float32 subnormal, so built as a double.
    return b == 0xFF ? nan : std::pow(2.0, static_cast<int>(b) - 127);
}

model::Float8 formatOf(const std::string& name) {
    return name == "F8_E4M3"   ? model::Float8::E4M3
           : name == "F8_E5M2" ? model::Float8::E5M2
                               : model::Float8::E8M0;
}

/// Random float8 codes of moderate size: exponent fields in {0 (subnormal), 4..8} of E4M3
/// (2^-9 .. 480), random signs and mantissas; never NaN.
at::Tensor randomCodes(const std::vector<int64_t>& shape, std::mt19937& rng) {
    at::Tensor t = at::empty(shape, at::kByte);
    uint8_t* p = t.data_ptr<uint8_t>();
    const int exps[] = {0, 4, 5, 6, 7, 8};
    for (int64_t i = 0; i < t.numel(); ++i)
        p[i] = static_cast<uint8_t>((rng() & 1) << 7 | exps[rng() % 6] << 3 | (rng() & 7));
    return t;
}

/// The reference dequantization: each element times the scale of its block, as transformers'
/// Fp8Dequantize computes it (float32 product) rounded to `into`. `codes` [..., R, C], `scale`
/// [..., ceil(R/bm), ceil(C/bn)] (float64 values).
at::Tensor refDequantize(const at::Tensor& codes, const std::string& format,
                         const at::Tensor& scale, int64_t bm, int64_t bn, at::ScalarType into) {
    const int64_t R = codes.size(-2), C = codes.size(-1);
    const at::Tensor c = codes.reshape({-1, R, C});
    const at::Tensor s = scale.reshape({c.size(0), (R + bm - 1) / bm, (C + bn - 1) / bn});
    at::Tensor out = at::empty(c.sizes(), at::kDouble);
    auto o = out.accessor<double, 3>();
    auto ca = c.accessor<uint8_t, 3>();
    auto sa = s.accessor<double, 3>();
    for (int64_t l = 0; l < c.size(0); ++l)
        for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < C; ++j)
                o[l][i][j] = static_cast<double>(
                    static_cast<float>(refFloat8(format, ca[l][i][j]) * sa[l][i / bm][j / bn]));
    return out.to(at::kFloat).to(into).reshape(codes.sizes());
}

QString errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return QString::fromUtf8(e.what());
    }
    return {};
}

/// An MXFP4 (e2m1) nibble from its bit fields, as the OCP MX specification defines it: a sign, two
/// exponent bits (bias 1; 0: subnormal) and one mantissa bit.
double refFp4(unsigned nibble) {
    const double sign = (nibble & 8) ? -1.0 : 1.0;
    const int e = static_cast<int>((nibble >> 1) & 3), m = static_cast<int>(nibble & 1);
    return sign * (e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * std::ldexp(1.0, e - 1));
}

/// The weight [E, 32·G, R] that MXFP4 blocks [E, R, G, 16] and scales [E, R, G] hold, in float64:
/// byte j of group g holds columns 32g + 2j (its low nibble) and 32g + 2j + 1 (its high one) of
/// row r, times 2^(scale − 127); transformers' convert_moe_packed_tensors then transposes rows and
/// columns.
at::Tensor refMxfp4(const at::Tensor& blocks, const at::Tensor& scales) {
    const int64_t E = blocks.size(0), R = blocks.size(1), G = blocks.size(2);
    at::Tensor out = at::empty({E, 32 * G, R}, at::kDouble);
    auto o = out.accessor<double, 3>();
    auto b = blocks.accessor<uint8_t, 4>();
    auto sc = scales.accessor<uint8_t, 3>();
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r < R; ++r)
            for (int64_t g = 0; g < G; ++g) {
                const double scale = std::ldexp(1.0, static_cast<int>(sc[e][r][g]) - 127);
                for (int64_t j = 0; j < 16; ++j) {
                    o[e][32 * g + 2 * j][r] = refFp4(b[e][r][g][j] & 15u) * scale;
                    o[e][32 * g + 2 * j + 1][r] = refFp4(b[e][r][g][j] >> 4) * scale;
                }
            }
    return out;
}

/// Random MXFP4 blocks [shape…, 16] and scales [shape…] with scale bytes drawn from `exps`.
std::pair<at::Tensor, at::Tensor> randomMxfp4(const std::vector<int64_t>& shape,
                                              const std::vector<uint8_t>& exps, std::mt19937& rng) {
    std::vector<int64_t> blockShape = shape;
    blockShape.push_back(16);
    at::Tensor blocks = at::empty(blockShape, at::kByte), scales = at::empty(shape, at::kByte);
    for (int64_t i = 0; i < blocks.numel(); ++i)
        blocks.data_ptr<uint8_t>()[i] = static_cast<uint8_t>(rng());
    for (int64_t i = 0; i < scales.numel(); ++i)
        scales.data_ptr<uint8_t>()[i] = exps[rng() % exps.size()];
    return {blocks, scales};
}

/// Writes a quantized model's tensors into `quantizedDir` and its decoded ones into `refDir`
/// (beside their config.json files) and checks that the two compute identical logits, in
/// float32 and in their stored bfloat16.
void computesAsItsDecodedWeights(const QString& quantizedDir, const std::vector<Raw>& quantized,
                                 const QString& refDir,
                                 const std::vector<std::pair<std::string, at::Tensor>>& plain) {
    writeRaw(quantizedDir + "/model.safetensors", quantized);
    model::writeSafetensors((refDir + "/model.safetensors").toStdString(), plain);
    const std::vector<int64_t> ids{3, 17, 99, 42, 7, 64, 120, 5, 33, 81, 2, 58};
    for (const model::ComputeDtype compute :
         {model::ComputeDtype::Auto, model::ComputeDtype::Stored}) {
        model::ModelOpenOptions o;
        o.compute = compute;
        const auto a = model::Model::open(quantizedDir.toStdString(), o);
        const auto b = model::Model::open(refDir.toStdString(), o);
        QCOMPARE(a->weightsDtype(), std::string("bfloat16"));
        QVERIFY(a->computeDtype() == b->computeDtype());
        const at::Tensor la = a->logits(ids), lb = b->logits(ids);
        QVERIFY(la.isfinite().all().item<bool>());
        const double diff = (la - lb).abs().max().item<double>();
        QVERIFY2(diff == 0, qPrintable(QStringLiteral("logits differ by up to %1").arg(diff)));
    }
}

json smallConfig(const std::string& arch) {
    json c = {
        {"architectures", {arch}},  {"hidden_size", 64},        {"intermediate_size", 96},
        {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
        {"num_hidden_layers", 2},   {"vocab_size", 128},        {"max_position_embeddings", 256},
        {"rms_norm_eps", 1e-6},     {"rope_theta", 10000.0},    {"tie_word_embeddings", false},
        {"torch_dtype", "bfloat16"}};
    if (arch == "Qwen3MoeForCausalLM") {
        c["num_experts"] = 4;
        c["num_experts_per_tok"] = 2;
        c["moe_intermediate_size"] = 40;
        c["norm_topk_prob"] = true;
    }
    if (arch == "GptOssForCausalLM") { // h and I multiples of MXFP4's 32
        c["intermediate_size"] = 32;
        c["num_local_experts"] = 4;
        c["num_experts_per_tok"] = 2;
        c["sliding_window"] = 8;
    }
    return c;
}

} // namespace

class TestModelFp8 : public QObject {
    Q_OBJECT
    QTemporaryDir m_dir;

private Q_SLOTS:
    void float8BytesFollowTheirFormats() {
        for (const std::string f : {"F8_E4M3", "F8_E5M2", "F8_E8M0"})
            for (int b = 0; b < 256; ++b) {
                const double want = refFloat8(f, static_cast<uint8_t>(b));
                const double got = model::float8Value(formatOf(f), static_cast<uint8_t>(b));
                if (std::isnan(want) ? !std::isnan(got) : got != want)
                    QFAIL(qPrintable(QStringLiteral("%1 byte 0x%2: %3, the format gives %4")
                                         .arg(QString::fromStdString(f))
                                         .arg(b, 2, 16, QLatin1Char('0'))
                                         .arg(got)
                                         .arg(want)));
            }
        // Landmarks PyTorch's float8 types document: E4M3's largest is 448 and it has no
        // infinity; E5M2's largest is 57344; E8M0's 127 is 1.
        QCOMPARE(model::float8Value(model::Float8::E4M3, 0x7E), 448.0f);
        QCOMPARE(model::float8Value(model::Float8::E4M3, 0x38), 1.0f);
        QCOMPARE(model::float8Value(model::Float8::E4M3, 0x01), 0.001953125f);
        QVERIFY(std::isnan(model::float8Value(model::Float8::E4M3, 0xFF)));
        QCOMPARE(model::float8Value(model::Float8::E5M2, 0x7B), 57344.0f);
        QVERIFY(std::isinf(model::float8Value(model::Float8::E5M2, 0xFC)));
        QCOMPARE(model::float8Value(model::Float8::E8M0, 0x7F), 1.0f);
        // The positive codes are ordered as their values.
        for (int b = 1; b < 0x7F; ++b)
            QVERIFY(model::float8Value(model::Float8::E4M3, static_cast<uint8_t>(b)) >
                    model::float8Value(model::Float8::E4M3, static_cast<uint8_t>(b - 1)));
    }

    void dequantizesBlockByBlock_data() {
        QTest::addColumn<QString>("format");
        QTest::addColumn<QString>("scaleDtype");
        QTest::addColumn<QList<qint64>>("shape");       // the weight's
        QTest::addColumn<QList<qint64>>("configBlock"); // {} unset; {0, 0} per matrix
        QTest::addColumn<QList<qint64>>("scaleShape");
        QTest::addColumn<QString>("weightsDtype"); // of the unquantized tensors
        QTest::newRow("128×128 blocks that divide")
            << "F8_E4M3"
            << "F32" << QList<qint64>{256, 384} << QList<qint64>{128, 128} << QList<qint64>{2, 3}
            << "BF16";
        // The config's blocks, not the grid's: 144 × 200 in 64 × 64 blocks is a 3 × 4 grid, which
        // would also divide it in 48 × 50 blocks.
        QTest::newRow("ragged last blocks (576 rows as DeepSeek's kv_a_proj)")
            << "F8_E4M3"
            << "F32" << QList<qint64>{144, 200} << QList<qint64>{64, 64} << QList<qint64>{3, 4}
            << "BF16";
        QTest::newRow("the block read from the grid")
            << "F8_E4M3"
            << "F32" << QList<qint64>{96, 64} << QList<qint64>{} << QList<qint64>{3, 2} << "BF16";
        QTest::newRow("one scale per matrix")
            << "F8_E4M3"
            << "F32" << QList<qint64>{40, 24} << QList<qint64>{0, 0} << QList<qint64>{} << "F16";
        QTest::newRow("packed experts [E, R, C]")
            << "F8_E4M3"
            << "F32" << QList<qint64>{3, 80, 48} << QList<qint64>{32, 32} << QList<qint64>{3, 3, 2}
            << "BF16";
        QTest::newRow("E5M2 weights, bfloat16 scales")
            << "F8_E5M2"
            << "BF16" << QList<qint64>{64, 64} << QList<qint64>{32, 32} << QList<qint64>{2, 2}
            << "BF16";
        QTest::newRow("power-of-two E8M0 scales, float32 weights")
            << "F8_E4M3"
            << "F8_E8M0" << QList<qint64>{64, 96} << QList<qint64>{32, 32} << QList<qint64>{2, 3}
            << "F32";
    }
    void dequantizesBlockByBlock() {
        QFETCH(QString, format);
        QFETCH(QString, scaleDtype);
        QFETCH(QList<qint64>, shape);
        QFETCH(QList<qint64>, configBlock);
        QFETCH(QList<qint64>, scaleShape);
        QFETCH(QString, weightsDtype);
        std::mt19937 rng(17);
        const std::vector<int64_t> ws(shape.begin(), shape.end());
        std::vector<int64_t> ss(scaleShape.begin(), scaleShape.end());
        const at::Tensor codes = randomCodes(ws, rng);
        // Scales as the file holds them; the reference takes their held values.
        at::Tensor scaleHeld, scaleValues;
        if (scaleDtype == QLatin1String("F8_E8M0")) {
            scaleHeld = at::randint(110, 135, ss, at::kByte);
            scaleValues = scaleHeld.to(at::kDouble).sub(127).exp2();
        } else {
            const at::ScalarType t =
                scaleDtype == QLatin1String("BF16") ? at::kBFloat16 : at::kFloat;
            scaleHeld = at::rand(ss, at::kFloat).mul(0.02).add(0.001).to(t);
            scaleValues = scaleHeld.to(at::kDouble);
        }
        const at::ScalarType into = weightsDtype == QLatin1String("F32")   ? at::kFloat
                                    : weightsDtype == QLatin1String("F16") ? at::kHalf
                                                                           : at::kBFloat16;
        const int64_t R = ws[ws.size() - 2], C = ws.back();
        int64_t bm = R, bn = C;
        if (configBlock.size() == 2 && configBlock[0] > 0) {
            bm = configBlock[0];
            bn = configBlock[1];
        } else if (configBlock.isEmpty()) {
            bm = R / ss[ss.size() - 2];
            bn = C / ss.back();
        }
        const QString file = m_dir.filePath(QString::fromLatin1(QTest::currentDataTag()) + ".st");
        writeRaw(file, {{"w", format.toStdString(), ws, bytesOf(codes)},
                        {"w_scale_inv", scaleDtype.toStdString(), ss, bytesOf(scaleHeld)},
                        rawOf("norm", at::ones({R * C}, into))});
        model::Checkpoint ck = model::Checkpoint::openFile(file.toStdString());
        QVERIFY(ck.quantized());
        QCOMPARE(ck.floatDtype(), weightsDtype.toStdString());
        if (configBlock.size() == 2)
            ck.setFloat8Blocks(configBlock[0], configBlock[1]);
        const at::Tensor want =
            refDequantize(codes, format.toStdString(),
                          ss.empty() ? scaleValues.reshape({1}) : scaleValues, bm, bn, into);
        const at::Tensor got = ck.load("w", at::kFloat, ws);
        QVERIFY(got.to(into).to(at::kFloat).equal(got)); // rounded once to the weights' dtype
        const double diff = (got - want.to(at::kFloat)).abs().max().item<double>();
        QVERIFY2(diff == 0, qPrintable(QStringLiteral("largest difference %1").arg(diff)));
        // map() gives the same (a float8 tensor cannot be mapped: it is dequantized).
        QVERIFY(ck.map("w", ws).to(at::kFloat).equal(got));
    }

    void badQuantizedTensorsAreNamed_data() {
        QTest::addColumn<QString>("scaleName");
        QTest::addColumn<QList<qint64>>("scaleShape");
        QTest::addColumn<QList<qint64>>("weightShape");
        QTest::addColumn<QString>("message");
        QTest::newRow("no scale") << "w.weight_scale" << QList<qint64>{1, 1}
                                  << QList<qint64>{64, 64}
                                  << "'w.weight' is float8 (F8_E4M3) with no 'w.weight_scale_inv'";
        QTest::newRow("a grid the blocks do not give")
            << "w.weight_scale_inv" << QList<qint64>{2, 3} << QList<qint64>{64, 64}
            << "'w.weight_scale_inv' has shape [2, 3]; the float8 'w.weight' [64, 64] in blocks "
               "of 32×32 needs [2, 2]";
        QTest::newRow("a float8 vector")
            << "w.weight_scale_inv" << QList<qint64>{1} << QList<qint64>{64} << "but not a matrix";
    }
    void badQuantizedTensorsAreNamed() {
        QFETCH(QString, scaleName);
        QFETCH(QList<qint64>, scaleShape);
        QFETCH(QList<qint64>, weightShape);
        QFETCH(QString, message);
        std::mt19937 rng(3);
        const std::vector<int64_t> ws(weightShape.begin(), weightShape.end());
        const std::vector<int64_t> ss(scaleShape.begin(), scaleShape.end());
        const QString file = m_dir.filePath(QStringLiteral("bad.st"));
        writeRaw(file, {{"w.weight", "F8_E4M3", ws, bytesOf(randomCodes(ws, rng))},
                        rawOf(scaleName.toStdString(), at::ones(ss, at::kFloat))});
        model::Checkpoint ck = model::Checkpoint::openFile(file.toStdString());
        ck.setFloat8Blocks(32, 32);
        const QString error = errorOf([&] { ck.load("w.weight", at::kFloat, ws); });
        QVERIFY2(error.startsWith(file + ": ") && error.contains(message), qPrintable(error));
        QVERIFY(!error.contains(QLatin1Char('\n')));
    }

    void badQuantizationConfigsAreRefused_data() {
        QTest::addColumn<QString>("quantization");
        QTest::addColumn<QString>("message");
        QTest::newRow("GPTQ") << R"({"quant_method": "gptq", "bits": 4})"
                              << "'quantization_config.quant_method' 'gptq' is not read";
        QTest::newRow("compressed-tensors")
            << R"({"quant_method": "compressed-tensors"})"
            << "'quantization_config.quant_method' 'compressed-tensors' is not read";
        QTest::newRow("no method") << R"({"weight_block_size": [128, 128]})"
                                   << "'quantization_config.quant_method' is missing";
        QTest::newRow("a block of one number")
            << R"({"quant_method": "fp8", "weight_block_size": [128]})"
            << "'quantization_config.weight_block_size' must be two positive integers";
        QTest::newRow("a block of zero rows")
            << R"({"quant_method": "fp8", "weight_block_size": [0, 128]})"
            << "'quantization_config.weight_block_size' must be two positive integers";
        QTest::newRow("an unknown activation scheme")
            << R"({"quant_method": "fp8", "activation_scheme": "per-token"})"
            << "'quantization_config.activation_scheme' 'per-token' is neither";
        QTest::newRow("an unknown scale format")
            << R"({"quant_method": "fp8", "scale_fmt": "e4m3"})"
            << "'quantization_config.scale_fmt' 'e4m3' is neither";
        QTest::newRow("not an object") << R"("fp8")"
                                       << "'quantization_config' must be an object";
    }
    void badQuantizationConfigsAreRefused() {
        QFETCH(QString, quantization);
        QFETCH(QString, message);
        json c = smallConfig("Qwen3ForCausalLM");
        c["quantization_config"] = json::parse(quantization.toStdString());
        const QString error = errorOf([&] { model::parseModelConfig(c.dump(), "/m/config.json"); });
        QVERIFY2(error.startsWith(QStringLiteral("/m/config.json: ")) && error.contains(message),
                 qPrintable(error));
    }

    void quantizationConfigIsRead() {
        json c = smallConfig("Qwen3ForCausalLM");
        c["quantization_config"] = {{"quant_method", "fp8"},
                                    {"activation_scheme", "dynamic"},
                                    {"fmt", "e4m3"},
                                    {"weight_block_size", {128, 64}}};
        model::ModelConfig m = model::parseModelConfig(c.dump(), "c");
        QCOMPARE(m.quantization.blockRows, int64_t{128});
        QCOMPARE(m.quantization.blockCols, int64_t{64});
        QCOMPARE(m.quantization.describe(), std::string("fp8, 128×64 blocks"));
        c["quantization_config"].erase("weight_block_size"); // transformers' default
        m = model::parseModelConfig(c.dump(), "c");
        QCOMPARE(m.quantization.blockRows, int64_t{128});
        c["quantization_config"]["weight_block_size"] = nullptr; // one scale per matrix
        m = model::parseModelConfig(c.dump(), "c");
        QCOMPARE(m.quantization.blockRows, int64_t{0});
        QCOMPARE(m.quantization.describe(), std::string("fp8, a scale per matrix"));
        c.erase("quantization_config");
        QVERIFY(model::parseModelConfig(c.dump(), "c").quantization.describe().empty());
    }

    // A quantized model computes what the same model computes with its dequantized weights
    // written in bfloat16: the dequantization is the only difference, so the logits are
    // identical, in float32 and in bfloat16.
    void quantizedModelComputesAsItsDequantizedWeights_data() {
        QTest::addColumn<QString>("arch");
        QTest::addColumn<QList<qint64>>("block");
        QTest::newRow("Qwen3, 32×32 blocks") << "Qwen3ForCausalLM" << QList<qint64>{32, 32};
        QTest::newRow("Qwen3-MoE, ragged 48×40 blocks")
            << "Qwen3MoeForCausalLM" << QList<qint64>{48, 40};
        QTest::newRow("Qwen3, a scale per matrix") << "Qwen3ForCausalLM" << QList<qint64>{};
    }
    void quantizedModelComputesAsItsDequantizedWeights() {
        QFETCH(QString, arch);
        QFETCH(QList<qint64>, block);
        const QString tag = QString::fromLatin1(QTest::currentDataTag()).replace(' ', '_');
        const QString fp8 = m_dir.filePath(tag + "_fp8"), ref = m_dir.filePath(tag + "_ref");
        QDir().mkpath(fp8);
        QDir().mkpath(ref);
        json config = smallConfig(arch.toStdString());
        QVERIFY(test::writeFile(ref + "/config.json", QByteArray::fromStdString(config.dump(1))));
        config["quantization_config"] = {{"quant_method", "fp8"},
                                         {"activation_scheme", "dynamic"},
                                         {"fmt", "e4m3"},
                                         {"modules_to_not_convert", {"lm_head"}}};
        config["quantization_config"]["weight_block_size"] =
            block.isEmpty() ? json(nullptr) : json({block[0], block[1]});
        QVERIFY(test::writeFile(fp8 + "/config.json", QByteArray::fromStdString(config.dump(1))));

        const model::CausalLMImpl shell(
            model::readModelConfig((ref + "/config.json").toStdString()));
        std::mt19937 rng(5);
        auto gen = at::detail::createCPUGenerator(11);
        std::vector<Raw> quantized;
        std::vector<std::pair<std::string, at::Tensor>> plain;
        int64_t matrices = 0;
        for (const auto& p : shell.named_parameters()) {
            const std::string& n = p.key();
            const std::vector<int64_t> shape = p.value().sizes().vec();
            const bool linear = shape.size() == 2 && n.find("embed_tokens") == std::string::npos &&
                                n.find("lm_head") == std::string::npos;
            if (!linear) {
                at::Tensor t = at::empty(shape, at::kFloat);
                if (n.find("norm") != std::string::npos)
                    t.normal_(1.0, 0.1, gen);
                else
                    t.normal_(0.0, 0.5, gen);
                t = t.to(at::kBFloat16);
                quantized.push_back(rawOf(n, t));
                plain.emplace_back(n, t);
                continue;
            }
            const int64_t R = shape[0], C = shape[1];
            const int64_t bm = block.isEmpty() ? R : block[0], bn = block.isEmpty() ? C : block[1];
            const std::vector<int64_t> grid{(R + bm - 1) / bm, (C + bn - 1) / bn};
            const at::Tensor codes = randomCodes(shape, rng);
            // Scales near 1/(2·sqrt(fan-in)), the codes' values being about 1.
            const at::Tensor scale =
                at::rand(grid, at::kFloat).add(0.5).div(2.0 * std::sqrt(static_cast<double>(C)));
            quantized.push_back({n, "F8_E4M3", shape, bytesOf(codes)});
            quantized.push_back(
                rawOf(n + "_scale_inv", block.isEmpty() ? scale.reshape({}) : scale));
            plain.emplace_back(
                n, refDequantize(codes, "F8_E4M3", scale.to(at::kDouble), bm, bn, at::kBFloat16));
            ++matrices;
        }
        QVERIFY(matrices >= 14); // q, k, v, o and the MLP's (or experts') in two layers
        computesAsItsDecodedWeights(fp8, quantized, ref, plain);
        if (QTest::currentTestFailed())
            return;
        // info names the stored form beside the dtype the weights load as.
        const json info = json::parse(test::cliOut({"info", "--model", fp8}).toStdString());
        QCOMPARE(info.value("dtype", ""), std::string("bfloat16"));
        QCOMPARE(info.value("quantization", ""), block.isEmpty()
                                                     ? std::string("fp8, a scale per matrix")
                                                     : "fp8, " + std::to_string(block[0]) + "×" +
                                                           std::to_string(block[1]) + " blocks");
    }

    void quantizedModelWithAMissingScaleIsNamed() {
        const QString dir = m_dir.filePath(QStringLiteral("missing_scale"));
        QDir().mkpath(dir);
        json config = smallConfig("Qwen3ForCausalLM");
        config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {32, 32}}};
        QVERIFY(test::writeFile(dir + "/config.json", QByteArray::fromStdString(config.dump())));
        const model::CausalLMImpl shell(model::parseModelConfig(config.dump(), "c"));
        std::mt19937 rng(9);
        std::vector<Raw> tensors;
        for (const auto& p : shell.named_parameters()) {
            const std::vector<int64_t> shape = p.value().sizes().vec();
            if (p.key().find("layers.1.mlp.down_proj") != std::string::npos)
                tensors.push_back({p.key(), "F8_E4M3", shape, bytesOf(randomCodes(shape, rng))});
            else
                tensors.push_back(rawOf(p.key(), at::full(shape, 0.01, at::kBFloat16)));
        }
        writeRaw(dir + "/model.safetensors", tensors);
        const QString error = errorOf([&] { model::Model::open(dir.toStdString()); });
        QVERIFY2(error.startsWith(dir + "/model.safetensors: tensor "
                                        "'model.layers.1.mlp.down_proj.weight' is float8"),
                 qPrintable(error));
    }

    void mxfp4DecodesAsTransformers() {
        std::mt19937 rng(21);
        // Scales across the range, 2^-127 (subnormal values) to 2^127 (past float32: inf).
        const auto [blocks, scales] =
            randomMxfp4({3, 5, 2}, {0, 1, 100, 126, 127, 128, 131, 200, 254}, rng);
        const QString file = m_dir.filePath(QStringLiteral("mxfp4.st"));
        writeRaw(file, {{"w_blocks", "U8", {3, 5, 2, 16}, bytesOf(blocks)},
                        {"w_scales", "U8", {3, 5, 2}, bytesOf(scales)},
                        rawOf("b", at::zeros({4}, at::kBFloat16))});
        const model::Checkpoint ck = model::Checkpoint::openFile(file.toStdString());
        QVERIFY(ck.has("w") && ck.quantized());
        QCOMPARE(ck.dtypeOf("w"), std::string("MXFP4"));
        const std::vector<int64_t> shape{3, 64, 5}; // [E, 32·G, R]
        QCOMPARE(ck.shapeOf("w"), shape);
        const std::vector<std::string> names = ck.names();
        QVERIFY(std::find(names.begin(), names.end(), "w") != names.end());
        QCOMPARE(ck.floatDtype(), std::string("BF16")); // the blocks' bytes are no weights' dtype
        QCOMPARE(ck.parameterCount(), int64_t{3 * 64 * 5 + 4});
        const at::Tensor want = refMxfp4(blocks, scales).to(at::kFloat);
        const at::Tensor got = ck.load("w", at::kFloat, shape);
        const int64_t differ = got.ne(want).sum().item<int64_t>();
        QVERIFY2(
            differ == 0,
            qPrintable(QStringLiteral("%1 of %2 values differ").arg(differ).arg(want.numel())));
        for (const at::ScalarType t : {at::kBFloat16, at::kHalf, at::kDouble})
            QVERIFY2(ck.load("w", t, shape).equal(want.to(t)), c10::toString(t));
        // One expert alone, as the CPU decodes them when a token reaches it.
        QVERIFY(ck.loadExpert("w", 2, at::kFloat).equal(want[2]));
        // map() decodes into the weights' dtype, as for float8.
        QVERIFY(ck.map("w", shape).equal(want.to(at::kBFloat16)));
        // A scale of 255 is 2^128, inf in float32 as in transformers' ldexp: a value times it
        // is inf, a zero NaN; in bfloat16 NaN there and bit for bit what rounding gives else.
        const auto [b2, s2] = randomMxfp4({1, 4, 1}, {254, 255}, rng);
        const QString nonFinite = m_dir.filePath(QStringLiteral("mxfp4_inf.st"));
        writeRaw(nonFinite, {{"w_blocks", "U8", {1, 4, 1, 16}, bytesOf(b2)},
                             {"w_scales", "U8", {1, 4, 1}, bytesOf(s2)},
                             rawOf("b", at::zeros({4}, at::kBFloat16))});
        at::Tensor ref = at::empty({1, 32, 4}, at::kFloat);
        for (int64_t r = 0; r < 4; ++r)
            for (int64_t j = 0; j < 32; ++j) {
                const uint8_t byte = b2[0][r][0][j / 2].item<uint8_t>();
                ref[0][j][r] = static_cast<float>(refFp4(j % 2 ? byte >> 4 : byte & 15u)) *
                               std::ldexp(1.0f, s2[0][r][0].item<uint8_t>() - 127);
            }
        ref = ref.to(at::kBFloat16);
        const at::Tensor inf = model::Checkpoint::openFile(nonFinite.toStdString())
                                   .load("w", at::kBFloat16, {1, 32, 4});
        const at::Tensor nan = ref.isnan();
        QVERIFY(nan.any().item<bool>() && ref.isinf().any().item<bool>());
        QVERIFY(inf.isnan().equal(nan)); // (NaNs' bits vary: libtorch's conversion gives 0xFFFF)
        QVERIFY(inf.masked_fill(nan, 0)
                    .view(at::kShort)
                    .equal(ref.masked_fill(nan, 0).view(at::kShort)));
    }

    void badMxfp4TensorsAreNamed_data() {
        QTest::addColumn<QString>("scalesName");
        QTest::addColumn<QString>("scalesDtype");
        QTest::addColumn<QList<qint64>>("scalesShape");
        QTest::addColumn<QList<qint64>>("blocksShape");
        QTest::addColumn<QString>("message");
        QTest::newRow("no scales") << "w_scale"
                                   << "U8" << QList<qint64>{2, 3, 2} << QList<qint64>{2, 3, 2, 16}
                                   << "MXFP4 blocks 'w_blocks' have no 'w_scales' to scale them";
        QTest::newRow("scales of another grid")
            << "w_scales"
            << "U8" << QList<qint64>{2, 3, 3} << QList<qint64>{2, 3, 2, 16}
            << "MXFP4 scales 'w_scales' are U8 [2, 3, 3]; the blocks 'w_blocks' need U8 [2, 3, 2]";
        QTest::newRow("scales that are floats")
            << "w_scales"
            << "F32" << QList<qint64>{2, 3, 2} << QList<qint64>{2, 3, 2, 16}
            << "MXFP4 scales 'w_scales' are F32 [2, 3, 2]";
        QTest::newRow("blocks that are no blocks of 16 bytes")
            << "w_scales"
            << "U8" << QList<qint64>{2, 3} << QList<qint64>{2, 3, 32}
            << "MXFP4 blocks 'w_blocks' have shape [2, 3, 32]; they must be [experts, rows, "
               "groups, 16]";
    }
    void badMxfp4TensorsAreNamed() {
        QFETCH(QString, scalesName);
        QFETCH(QString, scalesDtype);
        QFETCH(QList<qint64>, scalesShape);
        QFETCH(QList<qint64>, blocksShape);
        QFETCH(QString, message);
        const std::vector<int64_t> bs(blocksShape.begin(), blocksShape.end());
        const std::vector<int64_t> ss(scalesShape.begin(), scalesShape.end());
        const QString file = m_dir.filePath(QStringLiteral("bad_mxfp4.st"));
        const at::Tensor scales = scalesDtype == QLatin1String("F32")
                                      ? at::ones(ss, at::kFloat)
                                      : at::full(ss, 127, at::kByte);
        writeRaw(file,
                 {{"w_blocks", "U8", bs, bytesOf(at::zeros(bs, at::kByte))},
                  {scalesName.toStdString(), scalesDtype.toStdString(), ss, bytesOf(scales)}});
        const model::Checkpoint ck = model::Checkpoint::openFile(file.toStdString());
        const QString error = errorOf([&] { ck.load("w", at::kFloat, {2, 64, 3}); });
        QVERIFY2(error.startsWith(file + ": ") && error.contains(message), qPrintable(error));
        QVERIFY(!error.contains(QLatin1Char('\n')));
    }

    void mxfp4ConfigIsRead() {
        json c = smallConfig("GptOssForCausalLM");
        c["quantization_config"] = {{"quant_method", "mxfp4"},
                                    {"modules_to_not_convert",
                                     {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                      "model.embed_tokens", "lm_head"}}};
        const model::ModelConfig m = model::parseModelConfig(c.dump(), "c");
        QCOMPARE(m.quantization.method, std::string("mxfp4"));
        QCOMPARE(m.quantization.describe(),
                 std::string("mxfp4, 4-bit e2m1 values with a power-of-two scale per 32"));
    }

    // The keeper of decoded experts (expert_keeper.h): within its budget, the experts reached in
    // the most calls; experts taking turns keep the same ones held.
    void expertKeeperHoldsTheMostReached() {
        { // ten experts of one byte in turn, room for four: the first four stay, four hits a turn
            model::ExpertKeeper k(4);
            for (int turn = 0; turn < 5; ++turn) {
                const int64_t hits = k.hits();
                for (int64_t id = 0; id < 10; ++id)
                    if (!k.reach(id)) {
                        const auto a = k.admit(id, 1);
                        QCOMPARE(a.keep, turn == 0 && id < 4);
                        QVERIFY(a.drop.empty());
                    }
                QCOMPARE(k.hits() - hits, turn == 0 ? 0 : 4);
                QCOMPARE(k.held(), int64_t{4});
            }
            QCOMPARE(k.reaches(), int64_t{50});
        }
        { // reached in more calls, an expert takes the place of the fewest-reached, then the
          // longest unreached
            model::ExpertKeeper k(2);
            for (int64_t id : {0, 1, 2}) {
                QVERIFY(!k.reach(id));
                QCOMPARE(k.admit(id, 1).keep, id < 2);
            }
            QVERIFY(k.reach(1));  // 1: two calls
            QVERIFY(!k.reach(2)); // 2: two calls, in place of 0 (one)
            auto a = k.admit(2, 1);
            QVERIFY(a.keep);
            QCOMPARE(a.drop, std::vector<int64_t>{0});
            QVERIFY(!k.reach(0)); // 0: two calls, as 1 and 2: none dropped for it
            a = k.admit(0, 1);
            QVERIFY(!a.keep && a.drop.empty());
            QVERIFY(k.reach(1) && k.reach(2));
            QCOMPARE(k.held(), int64_t{2});
        }
        { // among the fewest-reached, the longest unreached goes first (not the lowest id)
            model::ExpertKeeper k(2);
            for (int64_t id : {1, 0}) {
                QVERIFY(!k.reach(id));
                QVERIFY(k.admit(id, 1).keep);
            }
            QVERIFY(!k.reach(2));
            QVERIFY(!k.admit(2, 1).keep); // one call, as 0 and 1
            QVERIFY(!k.reach(2));
            const auto a = k.admit(2, 1);
            QVERIFY(a.keep);
            QCOMPARE(a.drop, std::vector<int64_t>{1});
        }
        { // kept ones reached as often are not dropped to make room, nor is anything for an
          // expert the ones it may replace cannot make room for
            model::ExpertKeeper k(3);
            QVERIFY(!k.reach(0));
            QVERIFY(k.admit(0, 2).keep);
            for (int i = 0; i < 5; ++i)
                k.reach(1);
            QVERIFY(k.admit(1, 1).keep);
            k.reach(2);
            QVERIFY(!k.reach(2)); // 2: two calls, more than 0's one, but 3 bytes
            const auto a = k.admit(2, 3);
            QVERIFY(!a.keep && a.drop.empty());
            QCOMPARE(k.held(), int64_t{3});
            QVERIFY(k.reach(0) && k.reach(1));
        }
        { // none held with no room, or an expert larger than it
            model::ExpertKeeper none(0), small(5);
            QVERIFY(!none.reach(7));
            QVERIFY(!none.admit(7, 1).keep);
            QVERIFY(!none.reach(7));
            QVERIFY(!small.reach(1));
            QVERIFY(!small.admit(1, 6).keep);
            QCOMPARE(none.hits() + small.hits() + none.held() + small.held(), int64_t{0});
            QVERIFY_THROWS_EXCEPTION(std::invalid_argument, none.reach(-1));
        }
    }

    // A gpt-oss whose experts are MXFP4 (as gpt-oss-20b and -120b are published) computes what
    // the same model computes with the experts decoded and written in bfloat16: identical
    // logits, in float32 and in bfloat16, however many decoded experts are kept.
    void mxfp4GptOssComputesAsItsDecodedWeights() {
        const QString mx = m_dir.filePath(QStringLiteral("gpt_oss_mxfp4")),
                      ref = m_dir.filePath(QStringLiteral("gpt_oss_ref"));
        QDir().mkpath(mx);
        QDir().mkpath(ref);
        json config = smallConfig("GptOssForCausalLM");
        QVERIFY(test::writeFile(ref + "/config.json", QByteArray::fromStdString(config.dump(1))));
        config["quantization_config"] = {
            {"quant_method", "mxfp4"},
            {"modules_to_not_convert", {"model.layers.*.self_attn", "lm_head"}}};
        QVERIFY(test::writeFile(mx + "/config.json", QByteArray::fromStdString(config.dump(1))));
        const model::CausalLMImpl shell(
            model::readModelConfig((ref + "/config.json").toStdString()));
        std::mt19937 rng(23);
        auto gen = at::detail::createCPUGenerator(29);
        std::vector<Raw> quantized;
        std::vector<std::pair<std::string, at::Tensor>> plain;
        int64_t packed = 0;
        for (const auto& p : shell.named_parameters()) {
            const std::string& n = p.key();
            const std::vector<int64_t> shape = p.value().sizes().vec();
            const bool experts =
                n.size() > 12 && (n.rfind("experts.gate_up_proj") == n.size() - 20 ||
                                  n.rfind("experts.down_proj") == n.size() - 17);
            if (!experts) {
                at::Tensor t = at::empty(shape, at::kFloat);
                t.normal_(n.find("norm") != std::string::npos ? 1.0 : 0.0, 0.1, gen);
                t = t.to(at::kBFloat16);
                quantized.push_back(rawOf(n, t));
                plain.emplace_back(n, t);
                continue;
            }
            // The weight [E, C, R] is held as blocks [E, R, C/32, 16] and scales [E, R, C/32].
            QCOMPARE(shape[1] % 32, int64_t{0});
            const auto [blocks, scales] =
                randomMxfp4({shape[0], shape[2], shape[1] / 32}, {119, 120, 121, 122}, rng);
            quantized.push_back({n + "_blocks", "U8", blocks.sizes().vec(), bytesOf(blocks)});
            quantized.push_back({n + "_scales", "U8", scales.sizes().vec(), bytesOf(scales)});
            plain.emplace_back(n, refMxfp4(blocks, scales).to(at::kFloat).to(at::kBFloat16));
            ++packed;
        }
        QCOMPARE(packed, int64_t{4}); // gate_up_proj and down_proj in two layers
        computesAsItsDecodedWeights(mx, quantized, ref, plain);
        if (QTest::currentTestFailed())
            return;
        // On the CPU the experts are decoded as tokens reach them, kept within a budget: with
        // none kept (every expert decoded again each time), and with room for two of the eight
        // (24 KiB each in float32: kept, dropped and decoded again as calls go), the logits stay
        // the same call after call.
        const auto full = model::Model::open(ref.toStdString());
        const std::vector<int64_t> ids{9, 4, 77, 31, 120, 6, 58, 13};
        const at::Tensor want = full->logits(ids);
        for (const char* mib : {"0", "0.05"}) {
            qputenv("SPARQLAB_EXPERT_CACHE_MB", mib);
            const auto lazy = model::Model::open(mx.toStdString());
            qunsetenv("SPARQLAB_EXPERT_CACHE_MB");
            for (const auto& call : {ids, std::vector<int64_t>{100, 2, 3}, ids})
                QVERIFY2(lazy->logits(call).equal(call == ids ? want : full->logits(call)), mib);
        }
        const json info = json::parse(test::cliOut({"info", "--model", mx}).toStdString());
        QCOMPARE(info.value("dtype", ""), std::string("bfloat16"));
        QCOMPARE(info.value("quantization", ""),
                 std::string("mxfp4, 4-bit e2m1 values with a power-of-two scale per 32"));
    }
};

QTEST_GUILESS_MAIN(TestModelFp8)
#include "test_model_fp8.moc"
