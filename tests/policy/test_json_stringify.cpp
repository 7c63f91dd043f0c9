// The invariant's failure text writes the offending value as JavaScript's JSON.stringify writes
// the value JSON.parse reads (DSH's own text). The expected column was produced by Node.js 20
// (`JSON.stringify(JSON.parse(text))`) and is kept here as literals. Both writers are checked:
// compact_json on a parsed tree (which has sorted its keys and cannot hold a lone surrogate) and
// the row-text writer SessionLog uses for a forged row (which keeps the text's key order).
#include "support/catch.hpp"

#include <dsh/sandbox_policy.hpp>
#include <dsh/session_log.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace {

using json = nlohmann::json;

/// One value: its JSON text, what JSON.stringify writes for it, and what compact_json writes for
/// nlohmann_json's tree of it when that differs (nullptr: the same).
struct Row {
  const char* text;
  const char* stringified;
  const char* from_tree = nullptr;
};

/// Returns what the row-text writer writes for `text`, which the row scanner must accept.
std::string from_text(std::string_view text) {
  dsh::detail::slog::RowFacts facts;
  dsh::detail::slog::RowScanner scanner(text);
  REQUIRE(scanner.scan(facts));
  std::string out;
  dsh::detail::slog::JsText(text).value(out);
  return out;
}

} // namespace

TEST_CASE("numbers: JavaScript's shortest round-trip form and exponent rules", "[stringify]") {
  const std::vector<Row> rows{
      {"1.0", "1"},
      {"1E2", "100"},
      {"1e+2", "100"},
      {"1E-0", "1"},
      {"1e-7", "1e-7"},
      {"1.25e-7", "1.25e-7"},
      {"1e-6", "0.000001"},
      {"0.000001", "0.000001"},
      {"0.0000001", "1e-7"},
      {"123e-20", "1.23e-18"},
      {"1e20", "100000000000000000000"},
      {"1e21", "1e+21"},
      {"1.5e300", "1.5e+300"},
      {"-0.0", "0"},
      {"-0", "0"},
      {"0.1", "0.1"},
      {"4.35", "4.35"},
      {"0.30000000000000004", "0.30000000000000004"},
      {"-1.5", "-1.5"},
      {"-123.456e2", "-12345.6"},
      {"100", "100"},
      {"9007199254740992", "9007199254740992"},
      {"9007199254740993", "9007199254740992"},
      {"18446744073709551615", "18446744073709552000"},
      {"18446744073709551616", "18446744073709552000"},
      {"-9223372036854775808", "-9223372036854776000"},
      {"123456789012345680000", "123456789012345680000"},
      {"12345678901234567890123", "1.2345678901234568e+22"},
      {"5e-324", "5e-324"},
      {"2.2250738585072014e-308", "2.2250738585072014e-308"},
      {"1.7976931348623157e308", "1.7976931348623157e+308"},
      {"1e-400", "0"},
      {"-1e-400", "0"},
  };
  for (const Row& row : rows) {
    INFO(row.text);
    CHECK(from_text(row.text) == row.stringified);
    CHECK(dsh::detail::compact_json(json::parse(row.text)) == row.stringified);
  }
  // JSON.parse reads 1e400 as Infinity, which JSON.stringify writes as null. nlohmann_json (and
  // so the row scanner) refuses such a number; a tree can still hold one.
  CHECK(dsh::detail::compact_json(json(std::numeric_limits<double>::infinity())) == "null");
  CHECK(dsh::detail::compact_json(json(-std::numeric_limits<double>::infinity())) == "null");
  CHECK(dsh::detail::compact_json(json(std::numeric_limits<double>::quiet_NaN())) == "null");
  CHECK(dsh::detail::compact_json(json(std::numeric_limits<std::uint64_t>::max())) == "18446744073709552000");
}

TEST_CASE("objects: array-index keys first in numeric order, then the others", "[stringify]") {
  const std::vector<Row> rows{
      {R"({"b":1,"a":2})", R"({"b":1,"a":2})", R"({"a":2,"b":1})"},
      {R"({"10":1,"9":2,"a":3,"1":4})", R"({"1":4,"9":2,"10":1,"a":3})"},
      // 4294967295 (2^32 - 1) is not an array index, nor are "01" and "-1".
      {R"({"z":1,"4294967294":2,"4294967295":3,"01":4,"-1":5,"0":6})",
       R"({"0":6,"4294967294":2,"z":1,"4294967295":3,"01":4,"-1":5})",
       R"({"0":6,"4294967294":2,"-1":5,"01":4,"4294967295":3,"z":1})"},
      // A duplicated key: the last value, at the first key's place.
      {R"({"a":1,"b":2,"a":3})", R"({"a":3,"b":2})"},
      {R"([1.0,{"y":[],"x":{}},"s",null,true,false])", R"([1,{"y":[],"x":{}},"s",null,true,false])",
       R"([1,{"x":{},"y":[]},"s",null,true,false])"},
      {" { \"m\" : [ 1 , 2 ] } ", R"({"m":[1,2]})"},
  };
  for (const Row& row : rows) {
    INFO(row.text);
    CHECK(from_text(row.text) == row.stringified);
    CHECK(dsh::detail::compact_json(json::parse(row.text)) ==
          (row.from_tree != nullptr ? row.from_tree : row.stringified));
  }
}

TEST_CASE("strings: JSON.stringify's escapes; lone surrogates as \\u escapes", "[stringify]") {
  const std::vector<Row> rows{
      {R"("a\u0041\/\b\f\n\r\t\u0001\u001f\u007f\"\\")", "\"aA/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\\\"\\\\\""},
      {R"("\u00e9\u20ac\ud83d\ude80")", "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x9A\x80\""},
      {R"("\u2028\u2029")", "\"\xE2\x80\xA8\xE2\x80\xA9\""},
  };
  for (const Row& row : rows) {
    INFO(row.text);
    CHECK(from_text(row.text) == row.stringified);
    CHECK(dsh::detail::compact_json(json::parse(row.text)) == row.stringified);
  }
  // Lone surrogates (nlohmann_json cannot read them: only the row-text writer sees them).
  CHECK(from_text(R"("\ud83d")") == R"("\ud83d")");
  CHECK(from_text(R"("\uDE00")") == R"("\ude00")");
  CHECK(from_text(R"("\ude00\ud83d")") == R"("\ude00\ud83d")");
  CHECK(from_text(R"("workspace-write\ud800")") == R"("workspace-write\ud800")");
  CHECK(from_text(R"("\ud83d\ud83d\ude00")") == "\"\\ud83d\xF0\x9F\x98\x80\"");
  CHECK(from_text(R"({"\ud800":1,"\udc00":2})") == R"({"\ud800":1,"\udc00":2})");
  // A real U+FFFD stays a character; only a lone surrogate escape is written as an escape.
  CHECK(from_text(R"("\ufffd")") == "\"\xEF\xBF\xBD\"");
}
