// docs/job-file.md against the parser: every key the parser reads is documented in its
// section's table with the parser's own type, default and range, and the tables name no key the
// parser does not read. A default or range changed in one place and not the other fails here.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "jobs/job_spec.hpp"

namespace omnilearn::actors {
namespace {

struct DocRow {
  int line = 0;
  std::string type, default_value, unit, range, meaning;
};

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

// A cell as plain text: markdown's code quotes dropped.
std::string plain(const std::string& cell) {
  std::string out;
  for (char c : cell) {
    if (c != '`') out += c;
  }
  return trim(out);
}

// "section/key" or "section/key (when)" -> its row; duplicate rows are failures.
std::map<std::string, DocRow> read_doc(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::map<std::string, DocRow> rows;
  const std::regex heading(R"(^##\s+`?\[(\w+)\]`?\s*$)");
  std::string section, line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::smatch match;
    if (line.rfind("#", 0) == 0) {
      section = std::regex_match(line, match, heading) ? match[1].str() : "";
      continue;
    }
    if (section.empty() || line.rfind("|", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream cells_in(line.substr(1));
    for (std::string cell; std::getline(cells_in, cell, '|');) cells.push_back(plain(cell));
    if (cells.size() >= 1 && (cells[0] == "Key" || cells[0].rfind("---", 0) == 0)) continue;
    EXPECT_EQ(cells.size(), 6u) << path << ":" << number << ": a row has six cells (Key, Type, "
                                << "Default, Unit, Range, Meaning): " << line;
    if (cells.size() != 6) continue;
    DocRow row{number, cells[1], cells[2], cells[3], cells[4], cells[5]};
    const std::string id = section + "/" + cells[0];
    EXPECT_EQ(rows.count(id), 0u) << path << ":" << number << ": [" << section << "] " << cells[0]
                                  << " is documented twice";
    rows[id] = row;
  }
  return rows;
}

std::string id_of(const JobKey& key) {
  return key.section + "/" + key.key + (key.when.empty() ? "" : " (" + key.when + ")");
}

// The row the parser expects, to paste into the doc.
std::string expected_row(const JobKey& key) {
  return "| `" + key.key + "`" + (key.when.empty() ? "" : " (" + key.when + ")") + " | " +
         key.type + " | `" + key.default_value + "` | ... | " + key.range + " | ... |";
}

TEST(JobFileDoc, EveryKeyIsDocumentedWithTheParsersTypeDefaultAndRange) {
  const std::string path = std::string(OMNILEARN_DOCS_DIR) + "/job-file.md";
  auto rows = read_doc(path);
  const auto keys = job_spec_keys();
  ASSERT_GT(keys.size(), 40u);
  for (const auto& key : keys) {
    auto it = rows.find(id_of(key));
    if (it == rows.end()) {
      ADD_FAILURE() << path << ": [" << key.section << "] has no row for " << id_of(key)
                    << "; expected " << expected_row(key);
      continue;
    }
    const DocRow& row = it->second;
    const std::string where = path + ":" + std::to_string(row.line) + ": " + id_of(key);
    EXPECT_EQ(row.type, key.type) << where;
    EXPECT_EQ(row.default_value, key.default_value) << where;
    EXPECT_EQ(row.range, key.range) << where;
    EXPECT_FALSE(row.unit.empty()) << where << ": the unit cell is empty (write - for none)";
    EXPECT_FALSE(row.meaning.empty()) << where << ": the meaning cell is empty";
    rows.erase(it);
  }
  for (const auto& [id, row] : rows) {
    ADD_FAILURE() << path << ":" << row.line << ": " << id << " is not a key the parser reads";
  }
}

}  // namespace
}  // namespace omnilearn::actors
