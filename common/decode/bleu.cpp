// Corpus BLEU as sacreBLEU computes it (see bleu.h). The tokenizer works on UTF-8 bytes: its
// patterns only name ASCII characters, and a byte-wise scan makes the same non-overlapping
// matches as Python's code-point scan (a match either starts with or ends before an ASCII byte).
#include "common/decode/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>

#include "common/error.h"

namespace vitk::decode {
namespace {

bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}

// Length in bytes of the Python whitespace character (str.isspace) starting at s[i], or 0.
// Python splits and strips on these, not only on ASCII blanks.
size_t space_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  if (c == 0xc2 && (byte(1) == 0x85 || byte(1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (c == 0xe1 && byte(1) == 0x9a && byte(2) == 0x80) return 3;    // U+1680
  if (c == 0xe2 && byte(1) == 0x80) {
    const unsigned char b = byte(2);
    if ((b >= 0x80 && b <= 0x8a) || b == 0xa8 || b == 0xa9 || b == 0xaf) return 3;  // U+2000-200A,
    return 0;  // U+2028/9, U+202F
  }
  if (c == 0xe2 && byte(1) == 0x81 && byte(2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;  // U+3000
  return 0;
}

// Python's str.split(): the runs of non-whitespace.
std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> words;
  size_t i = 0, start = std::string_view::npos;
  while (i < s.size()) {
    const size_t n = space_at(s, i);
    if (n) {
      if (start != std::string_view::npos) words.push_back(s.substr(start, i - start));
      start = std::string_view::npos;
      i += n;
    } else {
      if (start == std::string_view::npos) start = i;
      ++i;
    }
  }
  if (start != std::string_view::npos) words.push_back(s.substr(start));
  return words;
}

// Python's str.rstrip().
std::string_view rstrip(std::string_view s) {
  size_t end = 0;  // one past the last non-space character
  for (size_t i = 0; i < s.size();) {
    const size_t n = space_at(s, i);
    i += n ? n : 1;
    if (!n) end = i;
  }
  return s.substr(0, end);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

// The first pattern's class: {|}~ [\]^_` space!"#$%& ()*+ :;<=>?@ and /.
bool is_split_symbol(unsigned char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
         (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

struct NgramStats {
  std::unordered_map<std::string, int64_t> counts;  // n-gram (words joined by ' ') -> count
  int64_t length = 0;                               // words
};

NgramStats ngrams(const std::string& tokenized) {
  NgramStats st;
  const auto words = split_words(tokenized);
  st.length = static_cast<int64_t>(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    std::string key;
    for (size_t n = 0; n < 4 && i + n < words.size(); ++n) {
      if (n) key += ' ';  // words never contain a space, so keys are unambiguous
      key.append(words[i + n]);
      ++st.counts[key];
    }
  }
  return st;
}

int order_of(const std::string& key) {
  return static_cast<int>(std::count(key.begin(), key.end(), ' ')) + 1;
}

// sacreBLEU's my_log: log(0) is a large negative number rather than -inf.
double my_log(double x) {
  return x == 0.0 ? -9999999999.0 : std::log(x);
}

}  // namespace

std::string tokenize_13a(const std::string& input) {
  std::string line = input;
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  replace_all(line, "&quot;", "\"");
  replace_all(line, "&amp;", "&");
  replace_all(line, "&lt;", "<");
  replace_all(line, "&gt;", ">");
  line = " " + line + " ";

  // Each step is one regular-expression substitution of mteval-v13a, applied left to right
  // without overlapping matches, as re.sub does.
  std::string a;
  for (unsigned char c : line) {
    if (is_split_symbol(c)) {
      a += ' ';
      a += static_cast<char>(c);
      a += ' ';
    } else {
      a += static_cast<char>(c);
    }
  }
  // ([^0-9])([\.,]) -> "\1 \2 "
  std::string b;
  for (size_t i = 0; i < a.size();) {
    if (i + 1 < a.size() && !is_digit(a[i]) && (a[i + 1] == '.' || a[i + 1] == ',')) {
      b += a[i];
      b += ' ';
      b += a[i + 1];
      b += ' ';
      i += 2;
    } else {
      b += a[i++];
    }
  }
  // ([\.,])([^0-9]) -> " \1 \2"
  std::string c;
  for (size_t i = 0; i < b.size();) {
    if (i + 1 < b.size() && (b[i] == '.' || b[i] == ',') && !is_digit(b[i + 1])) {
      c += ' ';
      c += b[i];
      c += ' ';
      c += b[i + 1];
      i += 2;
    } else {
      c += b[i++];
    }
  }
  // ([0-9])(-) -> "\1 \2 "
  std::string d;
  for (size_t i = 0; i < c.size();) {
    if (i + 1 < c.size() && is_digit(c[i]) && c[i + 1] == '-') {
      d += c[i];
      d += " - ";
      i += 2;
    } else {
      d += c[i++];
    }
  }
  std::string out;
  for (auto w : split_words(d)) {
    if (!out.empty()) out += ' ';
    out.append(w);
  }
  return out;
}

BleuResult bleu_from_statistics(const int64_t counts[4], const int64_t totals[4], int64_t hyp_len,
                                int64_t ref_len) {
  BleuResult r;
  r.hyp_len = hyp_len;
  r.ref_len = ref_len;
  for (int n = 0; n < 4; ++n) {
    r.counts[n] = counts[n];
    r.totals[n] = totals[n];
  }
  r.ratio = ref_len ? static_cast<double>(hyp_len) / static_cast<double>(ref_len) : 0.0;
  if (hyp_len < ref_len) {
    r.bp = hyp_len > 0 ? std::exp(1.0 - static_cast<double>(ref_len) / hyp_len) : 0.0;
  } else {
    r.bp = 1.0;
  }
  if (std::all_of(counts, counts + 4, [](int64_t x) { return x == 0; })) return r;  // score 0
  double smooth = 1.0;
  for (int n = 0; n < 4; ++n) {
    if (totals[n] == 0) break;  // a hypothesis corpus shorter than n words: precision 0
    if (counts[n] == 0) {
      smooth *= 2.0;
      r.precisions[n] = 100.0 / (smooth * static_cast<double>(totals[n]));
    } else {
      r.precisions[n] = 100.0 * static_cast<double>(counts[n]) / static_cast<double>(totals[n]);
    }
  }
  double sum = 0;
  for (double p : r.precisions) sum += my_log(p);
  r.score = r.bp * std::exp(sum / 4.0);
  return r;
}

BleuResult corpus_bleu(const std::vector<std::string>& hyps,
                       const std::vector<std::vector<std::string>>& refs) {
  if (refs.empty()) throw Error("BLEU: no reference set given");
  for (size_t k = 0; k < refs.size(); ++k) {
    if (refs[k].size() != hyps.size()) {
      throw Error("BLEU: reference set " + std::to_string(k + 1) + " has " +
                  std::to_string(refs[k].size()) + " segments, the hypotheses " +
                  std::to_string(hyps.size()));
    }
  }
  int64_t counts[4] = {}, totals[4] = {}, hyp_len = 0, ref_len = 0;
  for (size_t i = 0; i < hyps.size(); ++i) {
    std::unordered_map<std::string, int64_t> ref_max;  // max count of each n-gram over the refs
    std::vector<int64_t> ref_lens;
    for (const auto& set : refs) {
      if (set[i].empty()) continue;  // fewer references for this segment
      NgramStats r = ngrams(tokenize_13a(std::string(rstrip(set[i]))));
      ref_lens.push_back(r.length);
      for (auto& [key, n] : r.counts) ref_max[key] = std::max(ref_max[key], n);
    }
    if (ref_lens.empty()) {
      throw Error("BLEU: segment " + std::to_string(i + 1) + " has only empty references");
    }
    const NgramStats h = ngrams(tokenize_13a(std::string(rstrip(hyps[i]))));
    // The closest reference length; the shorter one on a tie.
    int64_t best = -1, best_diff = -1;
    for (int64_t len : ref_lens) {
      const int64_t diff = std::abs(h.length - len);
      if (best_diff < 0 || diff < best_diff || (diff == best_diff && len < best)) {
        best_diff = diff;
        best = len;
      }
    }
    hyp_len += h.length;
    ref_len += best;
    for (const auto& [key, n] : h.counts) {
      const int order = order_of(key) - 1;
      totals[order] += n;
      auto it = ref_max.find(key);
      if (it != ref_max.end()) counts[order] += std::min(n, it->second);
    }
  }
  return bleu_from_statistics(counts, totals, hyp_len, ref_len);
}

std::string bleu_signature(int nrefs) {
  return "nrefs:" + (nrefs < 0 ? std::string("var") : std::to_string(nrefs)) +
         "|case:mixed|eff:no|tok:13a|smooth:exp|version:" + kSacreBleuVersion;
}

std::string format_bleu(const BleuResult& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "BLEU = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = "
                "%lld)",
                r.score, r.precisions[0], r.precisions[1], r.precisions[2], r.precisions[3], r.bp,
                r.ratio, static_cast<long long>(r.hyp_len), static_cast<long long>(r.ref_len));
  return buf;
}

}  // namespace vitk::decode
