// The two side tables of a code object, in code units (2-byte words), in the formats shared by CPython 3.11
// and 3.12: the location table (Objects/locations.md) and the exception table
// (Objects/exception_handling_notes.txt). Readers throw BytecodeError on truncated input.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fastcomp::frontend::detail {

// A source span; every field is -1 when unknown.
struct Position {
  int32_t line = -1;
  int32_t end_line = -1;
  int32_t col = -1;
  int32_t end_col = -1;
  bool operator==(const Position&) const = default;
};

// One location-table entry: `units` consecutive code units share `pos`.
struct LocationEntry {
  int32_t units;
  Position pos;
};
std::vector<LocationEntry> read_location_table(std::string_view table, int first_line);

// Writes location entries the way CPython's assembler does: an entry covers at most 8 code units and uses the
// shortest form that can express its position relative to the previous line.
class LocationWriter {
 public:
  explicit LocationWriter(int first_line) : line_(first_line) {}
  void add(const Position& pos, int units);
  std::string take() { return std::move(out_); }

 private:
  void entry(const Position& pos, int units);
  std::string out_;
  int line_;  // the line the next entry's delta is relative to
};

// One exception-table entry in code units: [start, end) is covered, control goes to `target`.
struct RawExceptionEntry {
  int32_t start;
  int32_t end;
  int32_t target;
  int32_t depth;
  bool lasti;
};
std::vector<RawExceptionEntry> read_exception_table(std::string_view table);
std::string write_exception_table(const std::vector<RawExceptionEntry>& entries);

}  // namespace fastcomp::frontend::detail
