// Readers and writers of the location and exception tables. The writers make the same choices as CPython's
// assembler (Python/compile.c on 3.11, Python/assemble.c on 3.12), which is what makes decode -> encode
// reproduce both tables byte for byte.
#include "frontend/bytecode/tables.h"

#include "frontend/bytecode/decode.h"

namespace fastcomp::frontend::detail {
namespace {

// Location-table entry kinds (the 4 "code" bits of an entry's first byte).
constexpr int kShortFormLast = 9;  // 0..9: same line, column = code * 8 + high nibble of the next byte
constexpr int kOneLineFirst = 10;  // 10..12: line += code - 10, then column and end column bytes
constexpr int kNoColumns = 13;     // line += signed varint, no columns
constexpr int kLongForm = 14;      // line delta, end line delta, column + 1, end column + 1 as varints
constexpr int kNoLocation = 15;

class ByteReader {
 public:
  ByteReader(std::string_view bytes, const char* what) : bytes_(bytes), what_(what) {}
  bool done() const { return pos_ >= bytes_.size(); }
  uint8_t next() {
    if (done()) throw BytecodeError(std::string("fastcomp: truncated ") + what_);
    return static_cast<uint8_t>(bytes_[pos_++]);
  }
  // Location tables: 6-bit groups, least significant first, bit 6 = more follow.
  uint32_t location_varint() {
    uint8_t b = next();
    uint32_t value = b & 63;
    for (int shift = 6; b & 64; shift += 6) {
      b = next();
      value |= static_cast<uint32_t>(b & 63) << shift;
    }
    return value;
  }
  int32_t location_signed_varint() {
    uint32_t v = location_varint();
    return (v & 1) ? -static_cast<int32_t>(v >> 1) : static_cast<int32_t>(v >> 1);
  }
  // Exception tables: 6-bit groups, most significant first, bit 6 = more follow (bit 7 marks an entry's start).
  int32_t exception_varint() {
    uint8_t b = next();
    uint32_t value = b & 63;
    while (b & 64) {
      b = next();
      value = (value << 6) | (b & 63);
    }
    return static_cast<int32_t>(value);
  }

 private:
  std::string_view bytes_;
  const char* what_;
  size_t pos_ = 0;
};

void put_location_varint(std::string& out, uint32_t value) {
  for (; value >= 64; value >>= 6) out += static_cast<char>(64 | (value & 63));
  out += static_cast<char>(value);
}

void put_location_signed_varint(std::string& out, int32_t value) {
  uint32_t magnitude = value < 0 ? 0u - static_cast<uint32_t>(value) : static_cast<uint32_t>(value);
  put_location_varint(out, magnitude << 1 | (value < 0 ? 1 : 0));
}

void put_exception_varint(std::string& out, uint32_t value, uint8_t start_mark) {
  for (int shift = 24; shift > 0; shift -= 6) {
    if (value >= (1u << shift)) {
      out += static_cast<char>(((value >> shift) & 63) | 64 | start_mark);
      start_mark = 0;
    }
  }
  out += static_cast<char>((value & 63) | start_mark);
}

}  // namespace

std::vector<LocationEntry> read_location_table(std::string_view table, int first_line) {
  std::vector<LocationEntry> entries;
  ByteReader in(table, "location table");
  int32_t line = first_line;
  while (!in.done()) {
    uint8_t first = in.next();
    if (!(first & 0x80)) throw BytecodeError("fastcomp: location table entry without its start bit");
    int kind = (first >> 3) & 15;
    LocationEntry e{(first & 7) + 1, {}};
    if (kind == kNoLocation) {
      entries.push_back(e);
      continue;
    }
    if (kind <= kShortFormLast) {
      uint8_t second = in.next();
      e.pos.col = kind * 8 + (second >> 4);
      e.pos.end_col = e.pos.col + (second & 15);
    } else if (kind < kNoColumns) {
      line += kind - kOneLineFirst;
      e.pos.col = in.next();
      e.pos.end_col = in.next();
    } else if (kind == kNoColumns) {
      line += in.location_signed_varint();
    } else {  // kLongForm
      line += in.location_signed_varint();
      e.pos.end_line = static_cast<int32_t>(static_cast<uint32_t>(line) + in.location_varint());
      e.pos.col = static_cast<int32_t>(in.location_varint()) - 1;
      e.pos.end_col = static_cast<int32_t>(in.location_varint()) - 1;
    }
    e.pos.line = line;
    if (kind != kLongForm) e.pos.end_line = line;
    entries.push_back(e);
  }
  return entries;
}

void LocationWriter::add(const Position& pos, int units) {
  for (; units > 8; units -= 8) entry(pos, 8);
  if (units > 0) entry(pos, units);
}

void LocationWriter::entry(const Position& p, int units) {
  auto first_byte = [&](int kind) { out_ += static_cast<char>(0x80 | kind << 3 | (units - 1)); };
  if (p.line < 0) {
    first_byte(kNoLocation);
    return;
  }
  const int32_t delta = p.line - line_;
  if (p.col < 0 || p.end_col < 0) {
    if (p.end_line == p.line || p.end_line == -1) {
      first_byte(kNoColumns);
      put_location_signed_varint(out_, delta);
      line_ = p.line;
      return;
    }
  } else if (p.end_line == p.line) {
    if (delta == 0 && p.col < 80 && p.end_col - p.col < 16 && p.end_col >= p.col) {
      first_byte(p.col >> 3);
      out_ += static_cast<char>((p.col & 7) << 4 | (p.end_col - p.col));
      return;
    }
    if (delta >= 0 && delta < 3 && p.col < 128 && p.end_col < 128) {
      first_byte(kOneLineFirst + delta);
      out_ += static_cast<char>(p.col);
      out_ += static_cast<char>(p.end_col);
      line_ = p.line;
      return;
    }
  }
  first_byte(kLongForm);
  put_location_signed_varint(out_, delta);
  put_location_varint(out_, static_cast<uint32_t>(p.end_line) - static_cast<uint32_t>(p.line));
  put_location_varint(out_, static_cast<uint32_t>(p.col + 1));
  put_location_varint(out_, static_cast<uint32_t>(p.end_col + 1));
  line_ = p.line;
}

std::vector<RawExceptionEntry> read_exception_table(std::string_view table) {
  std::vector<RawExceptionEntry> entries;
  ByteReader in(table, "exception table");
  while (!in.done()) {
    RawExceptionEntry e{};
    e.start = in.exception_varint();
    e.end = e.start + in.exception_varint();
    e.target = in.exception_varint();
    int32_t depth_lasti = in.exception_varint();
    e.depth = depth_lasti >> 1;
    e.lasti = depth_lasti & 1;
    entries.push_back(e);
  }
  return entries;
}

std::string write_exception_table(const std::vector<RawExceptionEntry>& entries) {
  std::string out;
  for (const RawExceptionEntry& e : entries) {
    put_exception_varint(out, static_cast<uint32_t>(e.start), 0x80);
    put_exception_varint(out, static_cast<uint32_t>(e.end - e.start), 0);
    put_exception_varint(out, static_cast<uint32_t>(e.target), 0);
    put_exception_varint(out, static_cast<uint32_t>(e.depth << 1 | (e.lasti ? 1 : 0)), 0);
  }
  return out;
}

}  // namespace fastcomp::frontend::detail
