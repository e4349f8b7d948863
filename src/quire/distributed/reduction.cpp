#include "quire/distributed/reduction.h"

#include <fmt/format.h>

#include <stdexcept>

namespace quire::distributed {

namespace {

void send_buffer(Communicator& comm, int to, const ReductionBuffer& buffer) {
  comm.send(to, std::as_bytes(std::span(buffer.narrow)));
  comm.send(to, std::as_bytes(std::span(buffer.wide)));
}

void receive_buffer(Communicator& comm, int from, ReductionBuffer& buffer) {
  comm.receive(from, std::as_writable_bytes(std::span(buffer.narrow)));
  comm.receive(from, std::as_writable_bytes(std::span(buffer.wide)));
}

}  // namespace

void add_into(ReductionBuffer& sum, const ReductionBuffer& other) {
  if (sum.wide.size() != other.wide.size() || sum.narrow.size() != other.narrow.size())
    throw std::logic_error(fmt::format("internal: reduction buffers of {} + {} and {} + {} elements added",
                                       sum.wide.size(), sum.narrow.size(), other.wide.size(), other.narrow.size()));
  // Plain additions in each type (the build contracts nothing: -ffp-contract=off).
  for (size_t i = 0; i < sum.wide.size(); ++i) sum.wide[i] = sum.wide[i] + other.wide[i];
  for (size_t i = 0; i < sum.narrow.size(); ++i) sum.narrow[i] = sum.narrow[i] + other.narrow[i];
}

std::vector<TreeEdge> reduction_tree(int n) {
  std::vector<TreeEdge> edges;
  for (int stride = 1; stride < n; stride *= 2)
    for (int r = 0; r + stride < n; r += 2 * stride) edges.push_back({r, r + stride});
  return edges;
}

void sum_in_process(std::vector<ReductionBuffer>& shards) {
  for (const TreeEdge& e : reduction_tree(static_cast<int>(shards.size())))
    add_into(shards[static_cast<size_t>(e.into)], shards[static_cast<size_t>(e.from)]);
}

void sum_across_ranks(Communicator& comm, ReductionBuffer& mine) {
  const std::vector<TreeEdge> edges = reduction_tree(comm.size());
  const int me = comm.rank();
  // Up the tree: a rank sends its partial sum once, after every edge into it
  // of a smaller stride (which come earlier in the list) has been added.
  ReductionBuffer incoming{std::vector<double>(mine.wide.size()), std::vector<float>(mine.narrow.size())};
  for (const TreeEdge& e : edges) {
    if (e.from == me) send_buffer(comm, e.into, mine);
    if (e.into == me) {
      receive_buffer(comm, e.from, incoming);
      add_into(mine, incoming);
    }
  }
  // Down the same edges, last first: each rank receives the total once, then
  // passes it on along its own edges of smaller strides.
  for (auto e = edges.rbegin(); e != edges.rend(); ++e) {
    if (e->into == me) send_buffer(comm, e->from, mine);
    if (e->from == me) receive_buffer(comm, e->into, mine);
  }
}

}  // namespace quire::distributed
