#pragma once
// The decoding options of the commands that search (`vitk translate`, `vitk caption`,
// `vitk caption-eval`): beam search with its width, length penalty and n-best lists, greedy
// search, sampling with a temperature, top-k and seed, the precision of the products, and which
// cross-attention a picture shows.
#include "tools/cli.h"
#include "vitk/vitk.h"

namespace vitk::tools {

// --beam-size, --length-penalty, --greedy, --nbest, --sample, --temperature, --top-k, --seed and
// --precision (inference). The length limit is each command's own.
void add_search_options(po::options_description& options);

// The search the options ask for, in the API's terms, each option checked by name
// (vitk::UsageError): --greedy and --sample exclude each other, --temperature/--top-k/--seed need
// --sample, --nbest needs beam search and at most --beam-size; --precision is checked too.
SearchOptions search_options(const po::variables_map& vm);

// --precision as the API takes it: "" when not given (the checkpoint's default).
std::string precision_option(const po::variables_map& vm);

// --attention-layer last|N and --attention-head mean|N: the index, or -1 for `word` ("last",
// "mean"). vitk::UsageError naming the option for anything else.
int attention_index(const po::variables_map& vm, const char* option, const char* word);

}  // namespace vitk::tools
