#pragma once
// The one way this system writes a whole file (run summaries, the cluster file, checkpoints,
// reports): a reader, or a crash at any moment, finds the old content or the whole new one,
// never a part. The steps: a temporary file with a unique name in the target's directory (so
// the rename stays on one file system and cannot collide with another writer), write
// everything, fsync the file, rename it over the target, fsync the directory (so the rename
// itself survives a power loss). Any failure removes the temporary file and leaves the target
// as it was. A process killed mid-write leaves its temporary file (`<name>.tmp.<pid>.<random>`)
// behind, never a damaged target.
//
// Torch-free and dependency-free (its own target, ol_atomic_file), so that every layer,
// training/ included, writes files through it.

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string_view>

namespace omnilearn::runtime {

// A write that failed; the message names the step and the OS's reason. No temporary file is
// left, and the target is untouched, except after a failed flush of the directory (the last
// step): the target then names the new content, which a power loss may still undo.
class AtomicWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The points a write passes, in order (what AtomicWriteOptions::after_step reports).
enum class AtomicWriteStep {
  kCreated,        // the temporary file exists, empty
  kPartlyWritten,  // after the first chunk of a write that takes more than one
  kWritten,        // every byte written, not yet flushed
  kFlushed,        // fsync of the temporary file done
  kRenamed,        // the target now names the new content
  kDirectoryFlushed,
};

struct AtomicWriteOptions {
  mode_t mode = 0644;  // applied exactly (not masked by the umask)
  // Creates missing parent directories with mode 0700 (for files that hold secrets).
  bool create_directories = false;
  // For tests: called after each step, on the writing thread; a test kills the process here to
  // check what a crash at that point leaves.
  std::function<void(AtomicWriteStep)> after_step;
};

// Replaces `path`'s content with `bytes` as described above. Throws AtomicWriteError.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           const AtomicWriteOptions& options = {});

}  // namespace omnilearn::runtime
