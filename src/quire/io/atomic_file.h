#pragma once
// Whole-file reads and crash-safe writes. A checkpoint overwritten in place is
// lost if the process dies half-way; write_file_atomically never exposes a
// half-written file under the target name: readers see the old bytes or the
// new ones.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "quire/io/io_error.h"

namespace quire::io {

/// Writes `bytes` to `path`; every file quire writes goes through here.
///  - A regular file (or nothing) at `path` is replaced atomically: a
///    temporary file in the same directory (a rename is atomic only within
///    one file system) is written, fsynced and renamed over `path`, then the
///    directory is fsynced so the rename itself survives a crash. On any
///    failure the temporary file is removed, `path` is left as it was, and
///    IoError says which step failed and why. The new file's mode is 0666
///    minus the umask, as for a plain open(O_CREAT).
///  - A symbolic link is followed: the file it names is written as above and
///    the link stays a link.
///  - A device or a FIFO is written directly: a rename over it would replace
///    the node itself (as root, /dev/null).
///  - `-` is standard output.
/// An empty `path` is an IoError.
void write_file_atomically(const std::string& path, std::string_view bytes);

/// The most bytes read from a file that is not a regular one (a device, a
/// FIFO, /proc): such a file has no size to trust, and `/dev/zero` never ends.
inline constexpr size_t kMaxStreamBytes = size_t{1} << 30;

/// The whole content of `path`, at most `max_bytes` of it (and at most
/// kMaxStreamBytes where it is not a regular file). IoError on failure, e.g.
/// "data/x.npy: cannot open: No such file or directory", "/dev/zero: is longer
/// than 1 GiB and not a regular file", or where memory runs out.
std::string read_file(const std::string& path, size_t max_bytes = SIZE_MAX);

}  // namespace quire::io
