//===- Suggest.h - "did you mean ...?" for misspelled names ------*- C++
//-*-===//
//
// One rule for every place that refuses a name it does not know (command-line
// flags of dtc and dtc-run, attributes of dtc ops): suggest the known name
// closest in edit distance, when it is close enough to be a typo.
//
// Plain C++17, header-only, no exceptions, no MLIR: both the compiler and the
// runtime tools include it.
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_SUGGEST_H
#define DTC_RUNTIME_SUGGEST_H

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace dtc {

/// Edits (insert, delete, substitute one character, or swap two adjacent
/// ones) that turn `a` into `b` (optimal string alignment distance).
inline size_t editDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // Three rows: the one before last is needed for swaps.
  std::vector<size_t> prev2(m + 1), prev(m + 1), row(m + 1);
  for (size_t j = 0; j <= m; ++j)
    prev[j] = j;
  for (size_t i = 1; i <= n; ++i) {
    row[0] = i;
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], prev2[j - 2] + 1);
    }
    prev2.swap(prev);
    prev.swap(row);
  }
  return prev[m];
}

/// The candidate closest to `name` if it is a plausible typo of it (at most
/// one edit per three characters, at least one allowed; leading dashes of
/// flags do not count), else "". Ties go to the earlier candidate.
inline std::string closestMatch(std::string_view name,
                                const std::vector<std::string> &candidates) {
  auto core = [](std::string_view s) {
    while (!s.empty() && s.front() == '-')
      s.remove_prefix(1);
    return s;
  };
  const std::string_view wanted = core(name);
  std::string best;
  size_t bestDistance = 0;
  for (const std::string &candidate : candidates) {
    const std::string_view c = core(candidate);
    if (c.empty() || candidate == name)
      continue;
    const size_t distance = editDistance(wanted, c);
    const size_t allowed =
        std::max<size_t>(1, std::max(wanted.size(), c.size()) / 3);
    if (distance <= allowed && (best.empty() || distance < bestDistance)) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/// "; did you mean 'X'?" for the closest candidate, or "".
inline std::string didYouMean(std::string_view name,
                              const std::vector<std::string> &candidates) {
  const std::string match = closestMatch(name, candidates);
  return match.empty() ? std::string() : "; did you mean '" + match + "'?";
}

} // namespace dtc

#endif // DTC_RUNTIME_SUGGEST_H
