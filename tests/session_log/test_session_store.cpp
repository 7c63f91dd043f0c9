// DSH's session store: the names DSH gives a session's directories (checked against the
// encodings DSH's own code produces), finding a log by id with and without its cwd, listing,
// and the hostile cases: ids and cwds that try to leave the root, symbolic links planted in
// the store, duplicated ids, both encodings at once, and a header that belongs elsewhere.
#include "support/scoped.hpp"
#include "support/session_log.hpp"

#include <dsh/detail/slog/zstd_frames.hpp>
#include <dsh/session_store.hpp>

#include <optional>
#include <string>
#include <vector>

using dsh::DshLogEncoding;
using dsh::DshStoredSession;
using namespace dsh::test;
namespace fs = std::filesystem;

namespace {

/// Writes a plain log for `id` (header only, plus one switch) at `dir/session.jsonl`.
fs::path plant_log(const fs::path& dir, std::string_view id_json, std::string_view cwd_json,
                   std::string_view mode = "workspace-write") {
  fs::create_directories(dir);
  std::string content = R"({"type":"session","version":0,"id":)" + std::string(id_json) + R"(,"createdAt":1)";
  if (!cwd_json.empty()) {
    content += R"(,"cwd":)" + std::string(cwd_json);
  }
  content += ",\"delegationDepth\":0}\n";
  content += R"({"type":"sandbox/mode","seq":0,"time":2,"data":{"mode":")" + std::string(mode) + "\"}}\n";
  write_file(dir / "session.jsonl", content);
  return dir / "session.jsonl";
}

} // namespace

TEST_CASE("session ids are encoded into one safe segment as DSH encodes them", "[store]") {
  const std::vector<std::pair<std::string, std::string>> encoded{
      {"01JABCDEF-x_y.z", "01JABCDEF-x_y.z"},
      {".", "~002E"},
      {"..", "~002E~002E"},
      {"...", "..."},
      {"../etc", "..~002Fetc"},
      {"/etc/passwd", "~002Fetc~002Fpasswd"},
      {std::string("a\0b", 3), "a~0000b"},
      {"~", "~007E"},
      {"a b\\c", "a~0020b~005Cc"},
      {"\xC3\xA9", "~00E9"},
      {"\xEF\xBF\xBD", "~FFFD"},
      {"\xF0\x9F\x98\x80", "~D83D~DE00"}, // UTF-16 code units
  };
  for (const auto& [id, segment] : encoded) {
    CAPTURE(id);
    CHECK(dsh::dsh_encode_segment(id) == segment);
  }
  CHECK(thrown_message<dsh::ConfigError>([] { static_cast<void>(dsh::dsh_encode_segment("")); }) ==
        R"(DSH session id: expected a non-empty UTF-8 string; found "")");
  CHECK(thrown_message<dsh::ConfigError>([] { static_cast<void>(dsh::dsh_encode_segment("a\xFF")); }) ==
        "DSH session id: expected a non-empty UTF-8 string; found \"a\xEF\xBF\xBD\"");
}

TEST_CASE("project keys are computed as DSH computes them", "[store]") {
  const std::vector<std::pair<std::string, std::string>> keys{
      {"/srv/dsh-fixture/project", "--srv-dsh-fixture-project--"},
      {"/", "--root--"},
      {"---", "--root--"},
      {"//a//b/", "--a-b---"},
      {"C:\\Users\\me", "--C-Users-me--"},
      {"-lead/x", "--lead-x--"},
      {"/home/\xC3\xBC x/~", "--home-~00FC~0020x-~007E--"},
      {"/../..", "--..-..--"},
      {"/" + std::string(300, 'a'), "--" + std::string(251, 'a') + "--"},
  };
  for (const auto& [cwd, key] : keys) {
    CAPTURE(cwd);
    CHECK(dsh::dsh_project_key(cwd) == key);
  }
  CHECK(dsh::dsh_project_directory(std::nullopt) == "_no-cwd");
  CHECK(dsh::dsh_project_directory(std::string("/srv/p")) == "--srv-p--");
  CHECK(thrown_message<dsh::ConfigError>([] { static_cast<void>(dsh::dsh_project_key("")); }) ==
        R"(DSH session cwd: expected a non-empty UTF-8 string; found "")");
}

TEST_CASE("a session is found by id, with or without its cwd, and opens", "[store]") {
  const TempDir tmp;
  const fs::path root = tmp / "store";
  const fs::path s1 = plant_log(root / "--srv-p--" / "s1", R"("s1")", R"("/srv/p")");
  const fs::path s2 = plant_log(root / "_no-cwd" / "s2", R"("s2")", "", "danger-full-access");
  const fs::path dots = plant_log(root / "--srv-q--" / "~002E~002E", R"("..")", R"("/srv/q")");

  CHECK(dsh::locate_dsh_session(root, "s1") == DshStoredSession{s1, "--srv-p--", "s1", DshLogEncoding::plain});
  CHECK(dsh::locate_dsh_session(root, "s1", std::string("/srv/p")).path == s1);
  CHECK(dsh::locate_dsh_session(root, "s2", std::nullopt).path == s2);
  CHECK(dsh::locate_dsh_session(root, "..").path == dots);
  CHECK(dsh::open_dsh_session(dsh::locate_dsh_session(root, "s2")).sandbox_mode_override() ==
        dsh::SandboxMode::danger_full_access);
  CHECK(dsh::open_dsh_session(dsh::locate_dsh_session(root, "..")).header().id == "..");

  CHECK(std::string(log_error_from([&] {
                      static_cast<void>(dsh::locate_dsh_session(root, "s1", std::nullopt));
                    }).what()) == "session log \"" + root.native() +
                                      R"(": no DSH session "s1" (directory "s1") in the project directory "_no-cwd")");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::locate_dsh_session(root, "nope")); }).what()) ==
        "session log \"" + root.native() + R"(": no DSH session "nope" (directory "nope") in any project directory)");

  const std::vector<DshStoredSession> all = dsh::list_dsh_sessions(root);
  REQUIRE(all.size() == 3);
  CHECK(all[0].path == s1);
  CHECK(all[1].path == dots);
  CHECK(all[2].path == s2);
}

TEST_CASE("hostile ids and cwds never reach outside the root", "[store]") {
  const TempDir tmp;
  const fs::path root = tmp / "store";
  fs::create_directories(root / "--srv-p--");
  // Logs an attacker hopes a crafted id reaches: beside the root, above it, and at /.
  const fs::path outside = plant_log(tmp / "outside", R"("outside")", "");
  const fs::path above = plant_log(tmp / "s", R"("s")", "");
  const std::string outside_bytes = read_file(outside);
  const std::string above_bytes = read_file(above);
  for (const std::string& id :
       {std::string(".."), std::string("../outside"), std::string("../../outside"), (tmp / "outside").native(),
        std::string("./../s"), std::string("s/../../s"), std::string("..\\outside"), std::string("outside\0", 8)}) {
    INFO(id);
    const dsh::LogError error = log_error_from([&] { static_cast<void>(dsh::locate_dsh_session(root, id)); });
    CHECK(error.path() == root);
    CHECK(std::string(error.what()).find("no DSH session") != std::string::npos);
    for (const std::optional<std::string>& cwd : {std::optional<std::string>(), std::optional<std::string>("/.."),
                                                  std::optional<std::string>((tmp / "..").native())}) {
      CHECK_THROWS_AS(dsh::locate_dsh_session(root, id, cwd), dsh::LogError);
    }
  }
  CHECK(dsh::list_dsh_sessions(root).empty());
  CHECK(read_file(outside) == outside_bytes);
  CHECK(read_file(above) == above_bytes);
}

TEST_CASE("symbolic links planted in the store are never followed", "[store]") {
  const TempDir tmp;
  const fs::path root = tmp / "store";
  const fs::path elsewhere = tmp / "elsewhere";
  const fs::path target = plant_log(elsewhere / "--srv-p--" / "s9", R"("s9")", R"("/srv/p")");
  const std::string target_bytes = read_file(target);
  plant_log(root / "--srv-r--" / "real", R"("real")", R"("/srv/r")");

  // A project directory that links outside: not part of the store; named by cwd: refused.
  fs::create_directory_symlink(elsewhere / "--srv-p--", root / "--srv-p--");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::locate_dsh_session(root, "s9")); }).what())
            .ends_with(R"(no DSH session "s9" (directory "s9") in any project directory)"));
  CHECK(std::string(log_error_from([&] {
                      static_cast<void>(dsh::locate_dsh_session(root, "s9", std::string("/srv/p")));
                    }).what()) == "session log \"" + (root / "--srv-p--").native() +
                                      "\": is a symbolic link; a DSH session store never follows one out of its root");

  // A session directory, or a log file, that links outside: refused when the id reaches it,
  // skipped (and reported) by the listing.
  fs::create_directory_symlink(elsewhere / "--srv-p--" / "s9", root / "--srv-r--" / "s9");
  fs::create_directories(root / "--srv-r--" / "s8");
  fs::create_symlink(target, root / "--srv-r--" / "s8" / "session.jsonl");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::locate_dsh_session(root, "s9")); }).what()) ==
        "session log \"" + (root / "--srv-r--" / "s9").native() +
            "\": is a symbolic link; a DSH session store never follows one out of its root");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::locate_dsh_session(root, "s8")); }).what()) ==
        "session log \"" + (root / "--srv-r--" / "s8" / "session.jsonl").native() +
            "\": is a symbolic link; a DSH session store never follows one out of its root");
  std::vector<dsh::LogError> problems;
  const std::vector<DshStoredSession> listed = dsh::list_dsh_sessions(root, &problems);
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].encoded_id == "real");
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].path() == root / "--srv-r--" / "s8" / "session.jsonl");
  CHECK_THROWS_AS(dsh::list_dsh_sessions(root), dsh::LogError);
  CHECK(read_file(target) == target_bytes);
}

TEST_CASE("an id in several project directories, or with both encodings, is an error naming them", "[store]") {
  const TempDir tmp;
  const fs::path root = tmp / "store";
  const fs::path a = plant_log(root / "--srv-a--" / "dup", R"("dup")", R"("/srv/a")");
  const fs::path b = plant_log(root / "_no-cwd" / "dup", R"("dup")", "");
  CHECK(
      std::string(log_error_from([&] { static_cast<void>(dsh::locate_dsh_session(root, "dup")); }).what()) ==
      "session log \"" + root.native() +
          R"(": the DSH session "dup" appears in 2 project directories: "--srv-a--", "_no-cwd"; give its cwd to choose one)");
  CHECK(dsh::locate_dsh_session(root, "dup", std::string("/srv/a")).path == a);
  CHECK(dsh::locate_dsh_session(root, "dup", std::nullopt).path == b);

  plant_log(root / "_no-cwd" / "both", R"("both")", "");
  write_file(root / "_no-cwd" / "both" / "session.jsonl.zstd", "\x28\xB5\x2F\xFD");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::locate_dsh_session(root, "both")); }).what()) ==
        "session log \"" + (root / "_no-cwd" / "both" / "session.jsonl.zstd").native() +
            "\": the session directory holds both session.jsonl and session.jsonl.zstd; DSH refuses such a "
            "session as well");
}

TEST_CASE("a Zstandard log is found and opened; a name that lies about the encoding, or a header that belongs "
          "elsewhere, is refused",
          "[store]") {
  const TempDir tmp;
  const fs::path root = tmp / "store";
  fs::create_directories(root / "_no-cwd" / "z");
  const fs::path zstd = root / "_no-cwd" / "z" / "session.jsonl.zstd";
  const std::string header = R"({"type":"session","version":0,"id":"z","createdAt":1,"delegationDepth":0})";
  const std::string mode = R"({"type":"sandbox/mode","seq":0,"time":2,"data":{"mode":"danger-full-access"}})";
#if DSH_SANDBOX_POLICY_HAS_ZSTD
  const auto frame = [](std::string_view line) {
    return dsh::detail::encode_zstd_frame(std::vector<std::string_view>{line}).bytes;
  };
  write_file(zstd, frame(header) + frame(mode));
  const DshStoredSession stored = dsh::locate_dsh_session(root, "z");
  CHECK(stored.encoding == DshLogEncoding::zstd);
  CHECK(dsh::open_dsh_session(stored).sandbox_mode_override() == dsh::SandboxMode::danger_full_access);
  // A plain session named as a compressed one, and a compressed one named as plain. Refused
  // before anything is repaired: the torn last line stays.
  write_file(zstd, header + "\n" + mode + "\n{\"type\":\"torn");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::open_dsh_session(stored)); }).what()) ==
        "session log \"" + zstd.native() +
            "\": named session.jsonl.zstd, but the file holds plain JSON lines, not Zstandard frames");
  CHECK(read_file(zstd) == header + "\n" + mode + "\n{\"type\":\"torn");
  fs::rename(zstd, root / "_no-cwd" / "z" / "session.jsonl");
  write_file(root / "_no-cwd" / "z" / "session.jsonl", frame(header) + frame(mode));
  const DshStoredSession plain = dsh::locate_dsh_session(root, "z");
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::open_dsh_session(plain)); }).what()) ==
        "session log \"" + plain.path.native() +
            "\": named session.jsonl, but the file holds Zstandard frames, not plain JSON lines");
#else
  write_file(zstd, std::string("\x28\xB5\x2F\xFD", 4));
  const DshStoredSession stored = dsh::locate_dsh_session(root, "z");
  CHECK(stored.encoding == DshLogEncoding::zstd);
  CHECK(std::string(log_error_from([&] { static_cast<void>(dsh::open_dsh_session(stored)); }).what()) ==
        "session log \"" + zstd.native() +
            "\": cannot read a Zstandard-compressed session log: dsh-sandbox-policy was built without Zstandard "
            "support (libzstd was not found)");
#endif

  // A log moved (or planted) under another id or project: DSH refuses it, and so does the store.
  const fs::path moved = plant_log(root / "_no-cwd" / "victim", R"("attacker")", "");
  CHECK(
      std::string(log_error_from([&] {
                    static_cast<void>(dsh::open_dsh_session(dsh::locate_dsh_session(root, "victim")));
                  }).what()) ==
      "session log \"" + moved.native() +
          R"(" line 1: the session header's id "attacker" and cwd belong in "_no-cwd/attacker", not in "_no-cwd/victim")");
  const fs::path wrong_project = plant_log(root / "_no-cwd" / "w", R"("w")", R"("/srv/w")");
  CHECK(std::string(log_error_from([&] {
                      static_cast<void>(dsh::open_dsh_session(dsh::locate_dsh_session(root, "w")));
                    }).what()) ==
        "session log \"" + wrong_project.native() +
            R"(" line 1: the session header's id "w" and cwd belong in "--srv-w--/w", not in "_no-cwd/w")");
}
