// The shards' sum across ranks (src/quire/distributed/reduction.h) on its own:
// the tree's messages and additions for buffers of f32 gradients of several
// sizes, between the ranks of an MPI job on this machine (loopback: Open MPI's
// shared-memory transport between processes of one node).
//
//   mpirun -n 2 build/bench/bench_allreduce [--reps 200]
//
// Each size is summed `reps` times after 20 not counted, back to back; rank 0
// prints the median time of one sum and the bytes a shard sends up the tree,
// with the bandwidth that implies (a shard's bytes each way / the time). The
// sizes: 8 bytes (the latency: a loss and nothing else), the tutorial's
// 376, the GPT example's 428 040 and 4 and 40 MB (models 10 and 100 times it).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "quire/distributed/launch.h"
#include "quire/distributed/reduction.h"

int main(int argc, char** argv) {
  int reps = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  std::unique_ptr<quire::distributed::Communicator> world = quire::distributed::join_launched_job(60);
  if (!world) {
    std::fprintf(stderr, "run it under mpirun with 2 ranks or more: mpirun -n 2 %s\n", argv[0]);
    return 1;
  }
  // A shard's buffer as the trainer makes one: f32 gradients (the first
  // size's are none), then the loss in f64.
  const size_t sizes[] = {8, 376, 428040, 4000008, 40000008};
  if (world->rank() == 0)
    std::printf("%d ranks; bytes a shard, the median time of one sum, a shard's bytes / that time\n", world->size());
  for (size_t bytes : sizes) {
    quire::distributed::ReductionBuffer buffer;
    buffer.narrow.assign((bytes - 8) / 4, 1.0f / static_cast<float>(world->rank() + 1));
    buffer.wide.assign(1, 0.5);
    const quire::distributed::ReductionBuffer start = buffer;
    std::vector<double> times;
    for (int r = 0; r < reps + 20; ++r) {
      buffer = start;
      const auto began = quire::bench::Clock::now();
      quire::distributed::sum_across_ranks(*world, buffer);
      if (r >= 20) times.push_back(quire::bench::seconds_since(began));
    }
    const double t = quire::bench::median(times);
    if (world->rank() == 0)
      std::printf("%10zu bytes  %9.1f us  %8.2f GB/s\n", buffer.bytes(), t * 1e6,
                  static_cast<double>(buffer.bytes()) / t / 1e9);
  }
  return 0;
}
