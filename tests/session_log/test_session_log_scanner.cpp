// The row scanner that lets open validate without building trees: it accepts exactly the
// JSON grammar with well-formed UTF-8 (never anything nlohmann_json would refuse), and it
// extracts type, seq, seq0 and the length of data.dt as nlohmann_json reads them.
#include "support/session_log.hpp"

using dsh::detail::slog::RowFacts;
using dsh::detail::slog::RowScanner;

namespace {

/// Returns true if the scanner accepts `row`; whatever it accepts, nlohmann_json must parse once
/// the lone surrogate escapes are rewritten (and only then if the row holds one).
bool accepts(std::string_view row) {
  RowFacts facts;
  RowScanner scanner(row);
  const bool accepted = scanner.scan(facts);
  if (accepted) {
    std::string text(row);
    CHECK(dsh::detail::slog::replace_lone_surrogates(text) == facts.lone_surrogate);
    CHECK(nlohmann::json::accept(text));
    CHECK(nlohmann::json::accept(row) == !facts.lone_surrogate);
  }
  return accepted;
}

/// Returns the scanner's error for `row`, which must be refused.
std::string error_of(std::string_view row) {
  RowFacts facts;
  RowScanner scanner(row);
  REQUIRE_FALSE(scanner.scan(facts));
  return scanner.error();
}

RowFacts facts_of(std::string_view row) {
  RowFacts facts;
  RowScanner scanner(row);
  REQUIRE(scanner.scan(facts));
  return facts;
}

} // namespace

TEST_CASE("the scanner accepts the JSON grammar") {
  for (const char* row : {"{}", "[]", " { } ", "\t[\r]", "0", "-0", "12", "-12.5e+3", "1E2", "0.0e-0", "true", "false",
                          "null", R"("")", R"({"a":[1,{"b":null}],"c":"d"})", R"([1 , 2 ,3])", R"({"a":1,"a":2})"}) {
    INFO(row);
    CHECK(accepts(row));
  }
}

TEST_CASE("the scanner refuses what is not JSON") {
  for (const char* row : {"",        " ",           "{",          "}",        "[1,]",
                          "{,}",     R"({"a":1,})", R"({"a" 1})", R"({a:1})", "01",
                          "1.",      ".5",          "-",          "1e",       "1e+",
                          "+1",      "0x10",        "tru",        "nul",      "True",
                          "NaN",     "[1 2]",       "{} {}",      "'a'",      R"("unterminated)",
                          "[\"\t\"]"}) {
    INFO(row);
    CHECK_FALSE(accepts(row));
  }
}

TEST_CASE("strings: escapes and surrogate pairs as JSON defines them") {
  for (const char* row :
       {R"("\" \\ \/ \b \f \n \r \t")", R"("\u0000")", R"("\u00e9\u20AC")", R"("\ud83d\ude80")", "\"\x7f\""}) {
    INFO(row);
    CHECK(accepts(row));
  }
  CHECK(error_of(R"("\x")") == "not valid JSON at column 2: invalid escape");
  CHECK(error_of(R"("\u12")") == "not valid JSON at column 2: invalid \\u escape");
  CHECK(error_of(R"("\ud83d\u12")") == "not valid JSON at column 8: invalid \\u escape");
  CHECK(error_of("\"a\nb\"") == "not valid JSON at column 3: control character in a string");
  CHECK(error_of("\"\\") == "not valid JSON at column 2: unterminated string");
}

TEST_CASE("strings: lone UTF-16 surrogate escapes are valid JSON, as DSH writes them") {
  // JavaScript's JSON.stringify writes a lone surrogate as an escape; DSH does when a streamed
  // chunk splits an emoji's pair. RFC 8259's grammar allows it.
  for (const char* row : {R"("\ud83d")", R"("\uDE80")", R"("\ud83d\u0041")", R"("\ude80\ud83d")",
                          R"("\ud83d\ud83d\ude80")", R"("a\udbffb")", R"({"\ud800":"\udfff"})", R"(["\\ud83d"])"}) {
    INFO(row);
    CHECK(accepts(row));
  }
  CHECK_FALSE(facts_of(R"("\ud83d\ude80")").lone_surrogate);
  CHECK_FALSE(facts_of(R"("\\ud83d")").lone_surrogate); // an escaped backslash, then "ud83d"
  CHECK(facts_of(R"({"a":"\ud83d"})").lone_surrogate);
}

TEST_CASE("lone surrogate escapes are rewritten as \\ufffd, and only they") {
  const auto rewritten = [](std::string text) {
    dsh::detail::slog::replace_lone_surrogates(text);
    return text;
  };
  CHECK(rewritten(R"({"t":"\ud83d"})") == R"({"t":"\ufffd"})");
  CHECK(rewritten(R"(["\ude00\ud83d"])") == R"(["\ufffd\ufffd"])");
  CHECK(rewritten(R"(["\ud83d\ud83d\ude00"])") == R"(["\ufffd\ud83d\ude00"])");
  CHECK(rewritten(R"(["\ud83d\ude00","\\ud83d","\u00e9"])") == R"(["\ud83d\ude00","\\ud83d","\u00e9"])");
  CHECK(rewritten(R"(["x\\\ud83d"])") == R"(["x\\\ufffd"])");
  // What the tree then holds, and what a decoded key or type holds: U+FFFD.
  CHECK(nlohmann::json::parse(rewritten(R"("a\ud83db")")) == "a\xEF\xBF\xBD"
                                                             "b");
  CHECK(dsh::detail::slog::decode_string_token(R"("a\ud83db\ud83d\ude00")") == "a\xEF\xBF\xBD"
                                                                               "b\xF0\x9F\x98\x80");
  CHECK(dsh::detail::slog::decode_string_token(R"("sandbox/mode\udc00")") == "sandbox/mode\xEF\xBF\xBD");
}

TEST_CASE("strings: only well-formed UTF-8") {
  for (const char* row :
       {"\"\xC3\xA9\"", "\"\xE2\x82\xAC\"", "\"\xF0\x9F\x9A\x80\"", "\"\xEF\xBF\xBF\"", "\"\xF4\x8F\xBF\xBF\""}) {
    INFO(row);
    CHECK(accepts(row));
  }
  // Stray continuation, overlongs, surrogates, beyond U+10FFFF, truncated, and 0xFE/0xFF.
  for (const char* row :
       {"\"\x80\"", "\"\xC0\xAF\"", "\"\xC1\xBF\"", "\"\xE0\x80\xAF\"", "\"\xED\xA0\x80\"", "\"\xF0\x80\x80\xAF\"",
        "\"\xF4\x90\x80\x80\"", "\"\xF5\x80\x80\x80\"", "\"\xC3\"", "\"\xE2\x82\"", "\"\xFE\"", "\"\xFF\""}) {
    INFO(row);
    CHECK(error_of(row) == "not valid UTF-8 at column 2");
  }
  // Long plain runs go through the 8-byte fast path; a bad byte anywhere in them is still found.
  std::string row = "\"" + std::string(40, 'a') + "\"";
  CHECK(accepts(row));
  for (std::size_t at = 1; at < 41; ++at) {
    std::string bad = row;
    bad[at] = '\xFF';
    CHECK(error_of(bad) == "not valid UTF-8 at column " + std::to_string(at + 1));
    bad[at] = '\x01';
    CHECK(error_of(bad) == "not valid JSON at column " + std::to_string(at + 1) + ": control character in a string");
    bad[at] = '"';
    CHECK(error_of(bad) ==
          "not valid JSON at column " + std::to_string(at + 2) + ": unexpected text after the JSON value");
  }
}

TEST_CASE("numbers that overflow a double are refused, as nlohmann_json refuses them") {
  for (const std::string& row :
       {std::string("1e308"), std::string("-1.7976931348623157e308"), std::string("0.0001e312"), std::string("1e-400"),
        std::string("0e99999999999"), std::string("-0.0e+400"), std::string(308, '9'),
        "0." + std::string(400, '0') + "1", std::string("[1.5,2E+300]")}) {
    INFO(row);
    CHECK(accepts(row));
  }
  for (const std::string& row :
       {std::string("1e309"), std::string("-1.8e308"), std::string("1.7976931348623159e308"), std::string("10e308"),
        std::string("1e99999999999999999999"), std::string(309, '9'), std::string("[0,1e400]")}) {
    INFO(row);
    CHECK_FALSE(accepts(row));
    CHECK_FALSE(nlohmann::json::accept(row));
  }
  CHECK(error_of("[0,-2e400]") == "not valid JSON at column 4: number out of range");
}

TEST_CASE("nesting is limited to 512 levels") {
  CHECK(accepts(std::string(512, '[') + std::string(512, ']')));
  CHECK(error_of(std::string(513, '[') + std::string(513, ']')) ==
        "not valid JSON at column 513: nesting deeper than 512");
  std::string objects;
  for (int i = 0; i < 513; ++i) {
    objects += R"({"a":)";
  }
  CHECK(error_of(objects + "1" + std::string(513, '}')) == "not valid JSON at column 2561: nesting deeper than 512");
}

TEST_CASE("the scanner extracts type, seq, seq0 and the length of data.dt") {
  const RowFacts event = facts_of(R"({"data":{"dt":[9]},"time":1,"seq":18446744073709551615,"type":"a/b"})");
  CHECK(event.kind == dsh::detail::slog::RowKind::object);
  CHECK(event.type.valid);
  CHECK(event.type.token == R"("a/b")");
  CHECK_FALSE(event.type.escaped);
  CHECK(event.seq.valid);
  CHECK(event.seq.number == 18446744073709551615ULL);
  CHECK_FALSE(event.seq0.present);
  CHECK(event.dt.valid);
  CHECK(event.dt.number == 1);

  const RowFacts packed = facts_of(R"({"type":"text-chunks","seq0":4,"data":{"x":{"dt":[1]},"dt":[1,[2,3],{"d":4}]}})");
  CHECK(packed.seq0.valid);
  CHECK(packed.seq0.number == 4);
  CHECK(packed.dt.number == 3); // only the direct elements of data.dt; a nested "dt" is not it

  const RowFacts nested = facts_of(R"({"type":"a/b","seq":1,"x":{"type":"sandbox/mode","seq":5,"data":{"dt":[]}}})");
  CHECK(nested.type.token == R"("a/b")");
  CHECK(nested.seq.number == 1);
  CHECK_FALSE(nested.dt.present);

  const RowFacts escaped = facts_of(R"({"t\u0079pe":"sandbox\/mode","\u0073eq":3})");
  CHECK(escaped.type.escaped);
  CHECK(escaped.seq.number == 3);

  const RowFacts wrong = facts_of(R"({"type":7,"seq":"1","seq0":-2,"data":{"dt":{}}})");
  CHECK(wrong.type.present);
  CHECK_FALSE(wrong.type.valid);
  CHECK_FALSE(wrong.seq.valid);
  CHECK_FALSE(wrong.seq0.valid);
  CHECK(wrong.dt.present);
  CHECK_FALSE(wrong.dt.valid);

  CHECK_FALSE(facts_of(R"({"seq":18446744073709551616})").seq.valid);
  CHECK_FALSE(facts_of(R"({"seq":1e2})").seq.valid);
  CHECK(facts_of("[1]").kind == dsh::detail::slog::RowKind::array);
  CHECK(facts_of("\"s\"").kind == dsh::detail::slog::RowKind::other);
}
