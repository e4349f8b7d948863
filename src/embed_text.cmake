# Writes OUTPUT, a C++ file that defines `const char* const NAMESPACE::SYMBOL`
# holding the text of INPUT in a raw string literal, so that the `quire`
# binary needs no file beside it. Run at build time by src/CMakeLists.txt
# whenever INPUT (or this script) changes.

set(delimiter "quire_embedded")
file(READ "${INPUT}" text)
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains `)${delimiter}\"`, the delimiter of the raw string that embeds it")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by embed_text.cmake at build time: do not edit.

namespace ${NAMESPACE} {

extern const char* const ${SYMBOL};
const char* const ${SYMBOL} = R\"${delimiter}(${text})${delimiter}\";

}  // namespace ${NAMESPACE}
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
