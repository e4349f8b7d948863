#include "quire/compile/memory_placement.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace quire::compile {

namespace {

int64_t aligned(int64_t bytes) { return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

bool overlap(const Lifetime& a, const Lifetime& b) { return a.start < b.end && b.start < a.end; }

}  // namespace

Placement place_by_size(const std::vector<Lifetime>& lives) {
  for (const Lifetime& l : lives)
    if (l.end <= l.start || l.bytes < 0) throw std::logic_error("internal: a lifetime that ends before it starts");
  std::vector<size_t> order(lives.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return lives[a].bytes != lives[b].bytes ? lives[a].bytes > lives[b].bytes : lives[a].start < lives[b].start;
  });
  Placement p;
  p.offsets.assign(lives.size(), 0);
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, offset + size) of the placed values alive beside it
  for (size_t i : order) {
    const int64_t size = aligned(lives[i].bytes);
    taken.clear();
    for (size_t j : placed)
      if (overlap(lives[i], lives[j])) taken.emplace_back(p.offsets[j], p.offsets[j] + aligned(lives[j].bytes));
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;  // the lowest gap that holds it
    for (const auto& [from, to] : taken) {
      if (from - offset >= size) break;
      offset = std::max(offset, to);
    }
    p.offsets[i] = offset;
    p.arena_bytes = std::max(p.arena_bytes, offset + size);
    placed.push_back(i);
  }
  return p;
}

}  // namespace quire::compile
