# Writes OUTPUT, a C++ file that holds the text of INPUT (the profile that
# ships for the machine CI runs on) in a raw string literal, for
# machine::shipped_profile(). Run at build time by src/CMakeLists.txt whenever
# the profile (or this script) changes.

set(delimiter "quire_profile")
file(READ "${INPUT}" text)
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains `)${delimiter}\"`, the delimiter of the raw string that embeds it")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from profiles/*.json by embed_profile.cmake at build time: do not edit.

namespace quire::machine {

extern const char* const kShippedProfileJson;
const char* const kShippedProfileJson = R\"${delimiter}(${text})${delimiter}\";

}  // namespace quire::machine
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
