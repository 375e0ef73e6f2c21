// Mistral 3's vision-language folders (Mistral3ForConditionalGeneration): the language model, as
// text_config.model_type names it: Mistral's (Mistral Small 3.1 and 3.2), Ministral 3's
// (Ministral 3, Mistral Medium 3.5) or Mistral 4's (Mistral Small 4); its weights under
// model.language_model (transformers 5) or language_model.model (4.x), the vision tower unread.

#include "model/family_common.h"
#include "model/model_family.h"

namespace sparqlab::model {

void parseMistralText(const ConfigKeys& t, ModelConfig& c);    // mistral.cpp
void parseMinistral3Text(const ConfigKeys& t, ModelConfig& c); // ministral3.cpp
void parseMistral4Text(const ConfigKeys& t, ModelConfig& c);   // mistral4.cpp

namespace {

void parseMistral3(const ConfigKeys& k, ModelConfig& c) {
    // Mistral3Config's text_config is a MistralConfig unless it says otherwise.
    const std::string type = k.has("text_config") && k.raw("text_config").is_object()
                                 ? k.nested("text_config").string("model_type", "mistral")
                                 : "mistral";
    if (type == "mistral")
        readTextConfigFolder(k, c, parseMistralText);
    else if (type == "ministral3")
        readTextConfigFolder(k, c, parseMinistral3Text);
    else if (type == "mistral4")
        readTextConfigFolder(k, c, parseMistral4Text);
    else
        k.fail("text_config.model_type",
               "'" + type +
                   "' is not a language model SparQ Lab reads here (mistral, "
                   "ministral3, mistral4)");
    // The language model's own tie_word_embeddings where it gives one: transformers 5's
    // Mistral3Config defaults the top-level key to true, which a merged folder with its own
    // lm_head may carry (Ministral 3 3B ties at the text level).
    if (k.has("text_config") && k.raw("text_config").is_object() &&
        k.nested("text_config").has("tie_word_embeddings"))
        c.tieEmbeddings = k.nested("text_config").boolean("tie_word_embeddings", false);
}

} // namespace
} // namespace sparqlab::model

SPARQLAB_MODEL_FAMILY(mistral3) {
    return {.name = "mistral3",
            .label = "Mistral 3 (VL)",
            .examples = "Mistral Small 3.1 and 3.2, Ministral 3, Mistral Medium 3.5, Mistral "
                        "Small 4 (the language model of the vision-language folders)",
            .architectures = {"Mistral3ForConditionalGeneration"},
            .parse = parseMistral3};
}
