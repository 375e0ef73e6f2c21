#pragma once
/// \file model_family.h
/// The one table of model families (llama.cpp's LLM_ARCH_NAMES and its HOWTO-add-model): per
/// family the config.json architecture names it reads, its label and the models users know it
/// by, its checkpoint's weight layout, and the function that reads its keys into a ModelConfig
/// — the layer recipe the transformer builds. Each family is one unit of model/families/
/// (SPARQLAB_MODEL_FAMILY), registered through a generated list; `sparqlab-cli families`, the
/// README's model list, `info` and the error for an unknown architecture are built from it.
/// docs/adding-a-model-family.md walks through adding one.
///
/// Threading: immutable after first use; reentrant.

#include "model/config_keys.h"
#include "model/model_config.h"

#include <string>
#include <vector>

namespace sparqlab::model {

/// One family of the table.
struct ModelFamily {
    const char* name = nullptr;  ///< HF's model_type, e.g. "llama"
    const char* label = nullptr; ///< e.g. "Llama"
    /// Models users know it by, for the README's list ("Llama 2/3, TinyLlama, SmolLM").
    const char* examples = "";
    /// The config.json `architectures[0]` classes it reads.
    std::vector<std::string> architectures;
    Layout layout = Layout::Llama; ///< the checkpoint's module names
    /// Reads the family's keys into `c` (architectureName, torchDtype, eos and bos are set):
    /// HF's defaults of its config class for keys the config omits, ConfigError naming the key.
    void (*parse)(const ConfigKeys& keys, ModelConfig& c) = nullptr;
};

/// Every family, in name order.
const std::vector<const ModelFamily*>& modelFamilies();
/// The family reading `architecture` (config.json's class name); null if none.
const ModelFamily* findFamily(const std::string& architecture);
/// The family table as Markdown (the README's model list; `sparqlab-cli families --markdown`).
std::string familiesMarkdown();

} // namespace sparqlab::model

/// Registers a family unit: `SPARQLAB_MODEL_FAMILY(llama) { ModelFamily f; …; return f; }` at
/// file scope defines sparqlab::model::families::llama(), which the generated registry
/// (capture/CMakeLists.txt, family_registry.inc) calls.
#define SPARQLAB_MODEL_FAMILY(unit)                                                                \
    namespace sparqlab::model::families {                                                          \
    ModelFamily unit();                                                                            \
    }                                                                                              \
    ::sparqlab::model::ModelFamily sparqlab::model::families::unit()
