// The row scanner searches strings for their next special byte (quote, backslash, control
// character, non-ASCII) 16 bytes at a time with SSE2, 8 at a time in a 64-bit word, or byte by
// byte. Every width must accept exactly the same rows, with the same facts and the same errors,
// wherever a special byte falls relative to a window or to the end of the row. Rows are copied
// into buffers of exactly their size, so that AddressSanitizer sees any read past a row.
#include "support/session_log.hpp"

#include <initializer_list>
#include <random>
#include <utility>

using dsh::detail::slog::BasicRowScanner;
using dsh::detail::slog::RowFacts;
using dsh::detail::slog::ScanWidth;

namespace {

/// What a scanner of `Width` makes of `row`: "ok" and the extracted facts, or its error.
template <ScanWidth Width> std::string outcome(std::string_view row) {
  const std::vector<char> exact(row.begin(), row.end());
  const std::string_view copy(exact.data(), exact.size());
  RowFacts facts;
  BasicRowScanner<Width> scanner(copy);
  if (!scanner.scan(facts)) {
    return scanner.error();
  }
  std::string text = "ok";
  for (const dsh::detail::slog::Field* field : {&facts.type, &facts.seq, &facts.seq0, &facts.dt}) {
    text += " " + std::to_string(field->present) + std::to_string(field->valid) + std::to_string(field->escaped) + ":" +
            std::to_string(field->number) + ":" + std::string(field->token);
  }
  return text + " kind " + std::to_string(static_cast<int>(facts.kind)) + " lone " +
         std::to_string(facts.lone_surrogate);
}

/// The outcome of `row`, which every width must agree on (checked here; the checks are
/// spelled only on a disagreement, since the sweeps below scan some million rows).
std::string agreed(std::string_view row) {
  std::string bytes = outcome<ScanWidth::bytes>(row);
  const std::string words = outcome<ScanWidth::words>(row);
  if (words != bytes) {
    INFO(row);
    CHECK(words == bytes);
  }
#if defined(__SSE2__)
  const std::string sse2 = outcome<ScanWidth::sse2>(row);
  if (sse2 != bytes) {
    INFO(row);
    CHECK(sse2 == bytes);
  }
#endif
  return bytes;
}

std::string column(std::size_t index) { return std::to_string(index + 1); }

} // namespace

TEST_CASE("the build scans with its widest width") {
#if defined(__SSE2__)
  CHECK(dsh::detail::slog::NATIVE_SCAN_WIDTH == ScanWidth::sse2);
#else
  CHECK(dsh::detail::slog::NATIVE_SCAN_WIDTH != ScanWidth::sse2);
#endif
  CHECK(std::is_same_v<dsh::detail::slog::RowScanner, BasicRowScanner<dsh::detail::slog::NATIVE_SCAN_WIDTH>>);
}

TEST_CASE("every width finds a special byte at every offset of a string, at every alignment") {
  // What is put at offset `at` of a plain string body, and what the scanner must then say
  // (`at` is the byte's column, `after` the column just past what was put).
  struct Case {
    std::string bytes;
    std::string (*expected)(std::size_t at, std::size_t after);
  };
  const auto accepted = [](std::size_t, std::size_t) { return std::string("accepted"); };
  const std::vector<Case> cases = {
      {"\x01",
       [](std::size_t at, std::size_t) {
         return "not valid JSON at column " + column(at) + ": control character in a string";
       }},
      {"\x1F",
       [](std::size_t at, std::size_t) {
         return "not valid JSON at column " + column(at) + ": control character in a string";
       }},
      {"\xFF", [](std::size_t at, std::size_t) { return "not valid UTF-8 at column " + column(at); }},
      {"\x80", [](std::size_t at, std::size_t) { return "not valid UTF-8 at column " + column(at); }},
      {"\xC0\xAF", [](std::size_t at, std::size_t) { return "not valid UTF-8 at column " + column(at); }},
      {"\xE2\x82", [](std::size_t at, std::size_t) { return "not valid UTF-8 at column " + column(at); }},
      {"\xED\xA0\x80", [](std::size_t at, std::size_t) { return "not valid UTF-8 at column " + column(at); }},
      {"\xF4\x90\x80\x80", [](std::size_t at, std::size_t) { return "not valid UTF-8 at column " + column(at); }},
      {"\\x",
       [](std::size_t at, std::size_t) { return "not valid JSON at column " + column(at) + ": invalid escape"; }},
      {"\"", [](std::size_t,
                std::size_t after) { return "not valid JSON at column " + column(after) + ": expected ',' or ']'"; }},
      {"\x7F", accepted},
      {" ", accepted},
      {"\xC3\xA9", accepted},
      {"\xE2\x82\xAC", accepted},
      {"\xF0\x9F\x9A\x80", accepted},
      {"\xF4\x8F\xBF\xBF", accepted},
      {"\\n", accepted},
      {"\\\"", accepted},
      {"\\\\", accepted},
      {"\\u00e9", accepted},
  };
  std::size_t checked = 0;
  for (std::size_t pad = 0; pad <= 16; ++pad) {
    for (const std::size_t trail : std::initializer_list<std::size_t>{0, 1, 7, 8, 15, 16}) {
      for (const std::size_t length : std::initializer_list<std::size_t>{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33}) {
        for (std::size_t at = 0; at <= length; ++at) {
          for (const Case& c : cases) {
            const std::string body = std::string(at, 'a') + c.bytes + std::string(length - at, 'b');
            const std::string row = std::string(pad, ' ') + "[\"" + body + "\"]" + std::string(trail, ' ');
            const std::size_t where = pad + 2 + at;
            const std::string expected = c.expected(where, where + c.bytes.size());
            const std::string got = agreed(row);
            if (got != expected && !(expected == "accepted" && got.starts_with("ok "))) {
              INFO(row);
              CHECK(got == expected);
            }
            ++checked;
          }
          // The row ends inside the string: every width must stop at the end of the row.
          const std::string unterminated =
              std::string(pad, ' ') + "[\"" + std::string(at, 'a') + "\\n" + std::string(length - at, 'b');
          const std::string expected =
              "not valid JSON at column " + column(unterminated.size()) + ": unterminated string";
          if (const std::string got = agreed(unterminated); got != expected) {
            CHECK(got == expected);
          }
        }
      }
    }
  }
  CHECK(checked > 100000);
}

TEST_CASE("every width reads strings of the rows the log extracts facts from alike") {
  const std::string key_row = R"({"type":"assistant/chunk","seq":12,"data":{"dt":[1,2,3],"text":"ok"}})";
  CHECK(agreed(key_row) == R"(ok 110:0:"assistant/chunk" 110:12: 000:0: 110:3: kind 0 lone 0)");
  CHECK(agreed(R"({"t\u0079pe":"sandbox\/mode","\u0073eq":3})") ==
        R"(ok 111:0:"sandbox\/mode" 110:3: 000:0: 000:0: kind 0 lone 0)");
  CHECK(agreed(R"({"type":"x\ud83d","seq0":0,"data":{"dt":[]}})") ==
        R"(ok 111:0:"x\ud83d" 000:0: 110:0: 110:0: kind 0 lone 1)");
}

TEST_CASE("whitespace between tokens is accepted everywhere and errors keep their columns") {
  CHECK(agreed(" \t{ \"type\" :\r\n\"a/b\" , \"seq\" : 3 , \"data\" : { \"dt\" : [ 1 , 2 ] } } \n") ==
        R"(ok 110:0:"a/b" 110:3: 000:0: 110:2: kind 0 lone 0)");
  CHECK(agreed(R"({"a" 1})") == "not valid JSON at column 6: expected ':'");
  CHECK(agreed(R"({"a":1 x})") == "not valid JSON at column 8: expected ',' or '}'");
  CHECK(agreed(R"([1 x])") == "not valid JSON at column 4: expected ',' or ']'");
  CHECK(agreed(R"({"a":})") == "not valid JSON at column 6: expected a value");
  CHECK(agreed(R"({"a": })") == "not valid JSON at column 7: expected a value");
  CHECK(agreed(R"({"a":1, })") == "not valid JSON at column 9: expected a string key");
  CHECK(agreed(R"({"a":1 ,)") == "not valid JSON at column 9: expected a string key");
  CHECK(agreed("[1,  ") == "not valid JSON at column 6: expected a value");
  CHECK(agreed(R"({"seq" :01})") == "not valid JSON at column 10: expected ',' or '}'");
}

TEST_CASE("the one-pass integer read of seq and seq0 agrees with the number grammar") {
  CHECK(agreed(R"({"seq":0})") == "ok 000:0: 110:0: 000:0: 000:0: kind 0 lone 0");
  CHECK(agreed(R"({"seq":18446744073709551615})") == "ok 000:0: 110:18446744073709551615: 000:0: 000:0: kind 0 lone 0");
  CHECK(agreed(R"({"seq":18446744073709551616})").starts_with("ok 000:0: 100:"));
  CHECK(agreed(R"({"seq":1.5})").starts_with("ok 000:0: 100:"));
  CHECK(agreed(R"({"seq":1e2})").starts_with("ok 000:0: 100:"));
  CHECK(agreed(R"({"seq":-1})").starts_with("ok 000:0: 100:"));
  CHECK(agreed(R"({"seq0":1E400})") == "not valid JSON at column 9: number out of range");
  CHECK(agreed(R"({"seq":1.})") == "not valid JSON at column 10: invalid number");
  CHECK(agreed("{\"seq\":" + std::string(300, '9') + "}").starts_with("ok 000:0: 100:"));
  CHECK(agreed("{\"seq\":" + std::string(309, '9') + "}") == "not valid JSON at column 8: number out of range");
}

TEST_CASE("every width agrees on mutations of realistic rows") {
  const std::vector<std::string> seeds = {
      R"({"type":"tool/result","seq":7,"data":{"output":"int main() {\n\tstd::printf(\"%s\\n\", argv[0]);\n}\n résumé — 中文 ✓ 🚀 \ud83d","isError":false}})",
      R"({"type":"text-chunks","seq0":40,"time0":1764480000000,"data":{"dt":[3,0,12],"texts":["The ","file ","\"quoted\" "]}})",
      R"({"data":{"chunk":{"index":0,"text":"Let me check `main.cpp`","type":"text-delta"},"step":0,"turn":0},"seq":1,"time":1764480000001,"type":"assistant/chunk"})",
  };
  const std::string alphabet = std::string("\"\\/ u0aé\x01\x1F\x7F\x80\xBF\xC3\xE2\xED\xF0\xF4\xFF{}[],:") + '\0';
  std::mt19937_64 random(7);
  std::size_t accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string row = seeds[random() % seeds.size()];
    for (auto edits = 1 + random() % 3; edits > 0; --edits) {
      const std::size_t at = random() % row.size();
      const char byte = alphabet[random() % alphabet.size()];
      switch (random() % 3) {
      case 0:
        row[at] = byte;
        break;
      case 1:
        row.insert(row.begin() + static_cast<std::ptrdiff_t>(at), byte);
        break;
      default:
        row.erase(at, 1);
      }
    }
    accepted += agreed(row).starts_with("ok ") ? 1 : 0;
  }
  // The mutations reach both outcomes.
  CHECK(accepted > 1000);
  CHECK(accepted < 19000);
}
