#pragma once
// The prelude: quire's standard library, written in quire (the .qr files of
// this folder) and embedded into libquire when it is built, so that the
// compiler works from any directory with no file beside it.
//
// Every program imports the prelude implicitly: the elaborator loads each file
// as a program file marked FileInfo::prelude, named `prelude/<file>.qr` in
// diagnostics and dumps. Its functions are found after the user's own
// (docs/language.md §4.2 and §18). A prelude file imports nothing: its files
// see each other's functions as a user's file sees them.

#include <string_view>
#include <vector>

namespace quire::prelude {

/// One embedded file: its name as diagnostics show it and its text.
struct File {
  std::string_view path;  ///< "prelude/nn.qr"
  std::string_view text;
};

/// The prelude's files, sorted by name (defined in the generated prelude_files.cpp).
const std::vector<File>& files();

}  // namespace quire::prelude
