# Writes OUTPUT, a C++ file that holds the text of every PRELUDE_DIR/*.qr in a
# raw string literal (prelude.h declares what it defines). Run at build time
# by src/CMakeLists.txt whenever a prelude file (or this script) changes.
#
# The raw strings' delimiter must not occur in a file: one that contains it is
# refused here, rather than cut short by the compiler.

set(delimiter "quire_prelude")
file(GLOB prelude_files LIST_DIRECTORIES false "${PRELUDE_DIR}/*.qr")
list(SORT prelude_files)
set(entries "")
foreach(path IN LISTS prelude_files)
  file(READ "${path}" text)
  string(FIND "${text}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${path} contains `)${delimiter}\"`, the delimiter of the raw string that embeds it")
  endif()
  get_filename_component(name "${path}" NAME)
  string(APPEND entries "      {\"prelude/${name}\", R\"${delimiter}(${text})${delimiter}\"},\n")
endforeach()

set(source "// Generated from src/quire/prelude/*.qr by embed_prelude.cmake at build time: do not edit.

#include \"quire/prelude/prelude.h\"

namespace quire::prelude {

const std::vector<File>& files() {
  static const std::vector<File> all = {
${entries}  };
  return all;
}

}  // namespace quire::prelude
")
file(WRITE "${OUTPUT}" "${source}")
