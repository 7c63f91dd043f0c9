// libFuzzer target: SessionLog::open on arbitrary file contents. The file lives in a private
// directory under $TMPDIR (point it at a tmpfs such as /dev/shm for speed: open syncs only
// when it cuts a torn tail, but append always syncs).
// Properties:
//  - open throws nothing but LogError, and a refused file is left byte-for-byte unchanged;
//  - an accepted file is changed only by cutting an unterminated last line, as reported;
//  - every row the scanner accepted parses with nlohmann_json once its lone surrogate escapes
//    are rewritten (events() does that), the rows' seqs add up to next_seq(), and the O(1)
//    override equals the fold over the parsed rows;
//  - a line refused as malformed JSON is refused by nlohmann_json too, except where the
//    scanner is deliberately stricter: duplicated keys it reads, nesting, a byte-order mark
//    (nlohmann_json skips one), a NUL byte (nlohmann_json takes it for the end of the input).
//    The scanner is more lenient in one way, lone surrogate escapes (valid JSON, which DSH
//    writes): lines holding one are covered by the property above, not by this one;
//  - after an append the log still opens, one row longer;
//  - a Zstandard log (the input starts with a frame's magic; seeds `*.zst`) is refused or
//    accepted under the same properties, except that a repair cuts a torn last frame and may
//    write its complete rows back as one new frame after the cut;
//  - every line gets the same verdict, facts and error from the scanner whichever width
//    searches its strings (byte by byte, 8-byte words, SSE2).
#include <dsh/session_log.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

namespace {

const std::filesystem::path& log_path() {
  static const std::filesystem::path path = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "dsh-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::abort();
    }
    return std::filesystem::path(pattern) / "session.jsonl";
  }();
  return path;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Returns 1-based line `number` of `bytes` (without its newline).
std::string_view line_of(std::string_view bytes, std::size_t number) {
  for (std::size_t i = 1; i < number; ++i) {
    bytes.remove_prefix(std::min(bytes.size(), bytes.find('\n') + 1));
  }
  return bytes.substr(0, bytes.find('\n'));
}

/// Returns true if the input is a Zstandard log (starts with a frame's magic, 28 b5 2f fd).
bool compressed(std::string_view input) { return input.starts_with("\x28\xb5\x2f\xfd"); }

void check_refusal(const dsh::LogError& error, std::string_view input) {
  if (read_file(log_path()) != input) {
    std::abort(); // a refused file must be unchanged
  }
  if (compressed(input)) {
    return; // its lines are not the input's lines
  }
  // The reason follows the prefix that names the file and line (a value quoted in a reason
  // may itself hold any text).
  const std::string what = error.what();
  const std::string reason = what.substr(std::string(dsh::LogError(log_path(), error.line(), "").what()).size());
  const bool malformed =
      reason.starts_with("not valid JSON at column ") || reason.starts_with("not valid UTF-8 at column ");
  const bool stricter = what.ends_with("duplicate key") || what.ends_with("nesting deeper than 512");
  const std::string_view line = line_of(input, error.line());
  const bool quirk = line.starts_with("\xEF\xBB\xBF") || line.find('\0') != std::string_view::npos;
  if (malformed && !stricter && !quirk && nlohmann::json::accept(line)) {
    std::abort(); // the scanner refused JSON that nlohmann_json accepts
  }
}

void check_accepted(dsh::SessionLog& log, std::string_view input) {
  const std::string now = read_file(log_path());
  const auto repair = log.tail_repair();
  const std::size_t kept = repair ? repair->offset : input.size();
  if (log.encoding() == dsh::DshLogEncoding::zstd) {
    if (!compressed(input) || now.substr(0, kept) != input.substr(0, kept) ||
        (repair && kept + repair->removed_bytes != input.size()) || (!repair && now != input) ||
        (repair && repair->recovered_rows == 0 && now.size() != kept)) {
      std::abort(); // only a torn last frame may be cut (and its complete rows written back)
    }
  } else if (now != input.substr(0, kept) || (repair && (kept + repair->removed_bytes != input.size() ||
                                                         input.substr(kept).find('\n') != std::string_view::npos))) {
    std::abort(); // only a torn tail may be cut
  }
  std::uint64_t seqs = 0;
  for (const nlohmann::json& row : log.events()) { // throws LogError if nlohmann refuses a row
    const auto& type = row.at("type").get_ref<const std::string&>();
    seqs += type.find('/') == std::string::npos ? row.at("data").at("dt").size() + 1 : 1;
  }
  if (seqs != log.next_seq() || dsh::effective_mode(log.events()) != log.sandbox_mode_override()) {
    std::abort();
  }
  const std::size_t rows = log.events().size();
  log.append("fuzz/event", {{"rows", rows}});
  if (dsh::SessionLog::open(log_path()).events().size() != rows + 1) {
    std::abort();
  }
}

/// What a scanner of `Width` makes of `row`: its error, or the facts it extracted.
template <dsh::detail::slog::ScanWidth Width> std::string scan_outcome(std::string_view row) {
  dsh::detail::slog::RowFacts facts;
  dsh::detail::slog::BasicRowScanner<Width> scanner(row);
  if (!scanner.scan(facts)) {
    return scanner.error();
  }
  std::string text = "ok";
  for (const dsh::detail::slog::Field* field : {&facts.type, &facts.seq, &facts.seq0, &facts.dt}) {
    text += std::to_string(field->present) + std::to_string(field->valid) + std::to_string(field->escaped) + ":" +
            std::to_string(field->number) + ":" + std::string(field->token);
  }
  return text + std::to_string(static_cast<int>(facts.kind)) + std::to_string(facts.lone_surrogate);
}

void check_scan_widths(std::string_view input) {
  using dsh::detail::slog::ScanWidth;
  for (std::size_t start = 0; start <= input.size();) {
    const std::size_t end = std::min(input.find('\n', start), input.size());
    // An exact copy, so that AddressSanitizer sees a read past the line.
    const std::string_view line = input.substr(start, end - start);
    const std::unique_ptr<char[]> copy(new char[line.size()]);
    std::copy(line.begin(), line.end(), copy.get());
    const std::string_view exact(copy.get(), line.size());
    const std::string bytes = scan_outcome<ScanWidth::bytes>(exact);
    if (scan_outcome<ScanWidth::words>(exact) != bytes) {
      std::abort();
    }
#if defined(__SSE2__)
    if (scan_outcome<ScanWidth::sse2>(exact) != bytes) {
      std::abort();
    }
#endif
    start = end + 1;
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  check_scan_widths(input);
  write_file(log_path(), input);
  try {
    auto log = dsh::SessionLog::open(log_path());
    check_accepted(log, input);
  } catch (const dsh::LogError& error) {
    check_refusal(error, input);
  }
  return 0;
}
