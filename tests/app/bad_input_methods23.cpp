// The bad-input suite's cases for the methods of METHODS2.md and METHODS3.md (issue 38): their
// options out of range, captures without what they read (every position's query, the window's,
// the model's RoPE), and --inputs files that are missing, empty, of another method or of the
// wrong shape. Each is one line naming the option or the file.

#include "bad_input.h"

#include "capture/capture_file.h"
#include "capture/h5.h"

#include <ATen/ATen.h>

namespace sparqlab::test::bad_input {

QList<Case> methods23Cases(const QString& capture) {
    QList<Case> c;
    auto attendWith = [=](QStringList extra) {
        return [=](const QString& dir) {
            return QStringList{"attend", "--capture", capture, "--out", dir + "/a.h5"} + extra;
        };
    };
    c << Case{"expected-attention capture without every position's query",
              attendWith({"--method", "expected-attention", "--k", "4"}),
              1,
              {"cap.h5", "expected-attention", "--all-queries"}};
    c << Case{"expected-attention ratio of 1.5",
              attendWith({"--method", "expected-attention", "--ratio", "1.5"}),
              2,
              {"--ratio", "1.5"}};
    c << Case{"pqcache sub-spaces that do not divide head_dim",
              attendWith({"--method", "pqcache", "--pq-subspaces", "3"}),
              1,
              {"--pq-subspaces", "16"}};
    c << Case{"pqcache 17 bits",
              attendWith({"--method", "pqcache", "--pq-bits", "17"}),
              2,
              {"--pq-bits", "17"}};
    c << Case{"magicpig 31 hash bits",
              attendWith({"--method", "magicpig", "--hash-bits", "31"}),
              2,
              {"--hash-bits"}};
    c << Case{"shadowkv budget not a multiple of the chunk",
              attendWith({"--method", "shadowkv", "--budget", "12", "--chunk-size", "8"}),
              1,
              {"--budget", "--chunk-size"}};
    c << Case{"shadowkv unknown key mode",
              attendWith({"--method", "shadowkv", "--shadowkv-keys", "sideways"}),
              2,
              {"--shadowkv-keys", "sideways"}};
    c << Case{"max-probs for a method without it",
              attendWith({"--method", "sparq", "--r", "4", "--gqa", "max-probs"}),
              1,
              {"--gqa", "max-probs"}};
    c << Case{"adakv floor alpha of 2",
              attendWith({"--method", "adakv", "--floor-alpha", "2"}),
              2,
              {"--floor-alpha"}};
    c << Case{"adakv capture without the window's queries",
              attendWith({"--method", "adakv", "--k", "4", "--window", "2"}),
              1,
              {"cap.h5", "adakv", "--all-queries"}};
    c << Case{
        "rocketkv prompt budget below the window",
        attendWith({"--method", "rocketkv", "--r", "4", "--prompt-budget", "4", "--window", "8"}),
        1,
        {"--prompt-budget"}};
    // A capture that records no RoPE (one made before it was recorded).
    c << Case{"shadowkv pre-RoPE keys of a capture without the model's RoPE",
              [=](const QString& dir) {
                  const capture::CaptureReader in(capture.toStdString());
                  model::CaptureInfo info = in.info();
                  info.ropeInvFreq = at::Tensor();
                  const QString out = dir + "/norope.h5";
                  capture::CaptureWriter w(out.toStdString(), info);
                  w.add(in.read(0));
                  w.finish();
                  return QStringList{"attend",   "--capture",        out,        "--out",
                                     dir + "/a", "--method",         "shadowkv", "--budget",
                                     "0",        "--chunk-size",     "2",        "--local-chunks",
                                     "0",        "--outlier-chunks", "0",        "--shadowkv-keys",
                                     "pre"};
              },
              1,
              {"norope.h5", "shadowkv", "RoPE"}};
    c << Case{"capture RoPE frequencies of the wrong shape",
              [=](const QString& dir) {
                  const capture::CaptureReader in(capture.toStdString());
                  model::CaptureInfo info = in.info();
                  info.ropeInvFreq = at::Tensor();
                  const QString out = dir + "/rope.h5";
                  capture::CaptureWriter w(out.toStdString(), info);
                  w.root().write("rope_inv_freq", at::ones({2, 3}, at::kDouble));
                  w.add(in.read(0));
                  w.finish();
                  return QStringList{"attend",   "--capture",         out, "--out", dir + "/a.h5",
                                     "--method", "expected-attention"};
              },
              1,
              {"rope.h5", "rope_inv_freq"}};
    // --inputs files.
    auto withInputs = [=](std::function<void(const QString&)> write, QStringList method) {
        return [=](const QString& dir) {
            const QString in = dir + "/in.h5";
            write(in);
            return QStringList{"attend",      "--capture", capture, "--out",
                               dir + "/a.h5", "--inputs",  in} +
                   method;
        };
    };
    c << Case{"inputs file missing",
              [=](const QString& dir) {
                  return QStringList{"attend",         "--capture",   capture,
                                     "--out",          dir + "/a.h5", "--inputs",
                                     dir + "/none.h5", "--method",    "magicpig"};
              },
              1,
              {"none.h5"}};
    c << Case{"inputs file that is not HDF5",
              withInputs([](const QString& p) { writeAll(p, "not hdf5 at all"); },
                         {"--method", "magicpig"}),
              1,
              {"in.h5"}};
    c << Case{"inputs file without its inputs group",
              withInputs(
                  [](const QString& p) {
                      h5::File f = h5::File::create(p.toStdString());
                      f.root().write("hyperplanes", at::ones({16, 4}));
                      f.commit();
                  },
                  {"--method", "magicpig"}),
              1,
              {"in.h5", "inputs", "hyperplanes"}};
    c << Case{"inputs file of another method",
              withInputs(
                  [](const QString& p) {
                      h5::File f = h5::File::create(p.toStdString());
                      f.root().createGroup("inputs").write("hyperplanes", at::ones({16, 4}));
                      f.commit();
                  },
                  {"--method", "pqcache"}),
              1,
              {"in.h5", "hyperplanes", "pqcache"}};
    c << Case{"inputs hyperplanes of the wrong shape",
              withInputs(
                  [](const QString& p) {
                      h5::File f = h5::File::create(p.toStdString());
                      f.root().createGroup("inputs").write("hyperplanes", at::ones({16, 5}));
                      f.commit();
                  },
                  {"--method", "magicpig", "--hash-bits", "2", "--hash-tables", "2"}),
              1,
              {"in.h5", "hyperplanes", "[16, 4]"}};
    c << Case{"inputs hyperplanes with NaN",
              withInputs(
                  [](const QString& p) {
                      h5::File f = h5::File::create(p.toStdString());
                      f.root().createGroup("inputs").write("hyperplanes",
                                                           at::full({16, 4}, std::nan("")));
                      f.commit();
                  },
                  {"--method", "magicpig", "--hash-bits", "2", "--hash-tables", "2"}),
              1,
              {"in.h5", "hyperplanes", "non-finite"}};
    return c;
}

} // namespace sparqlab::test::bad_input
