// capture/core/text_escape.h: JSON and HTML output stay valid UTF-8 whatever bytes come in.
#include "capture/core/text_escape.h"

#include <gtest/gtest.h>

#include <string>

namespace tracecache {
namespace {

std::string json(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

TEST(TextEscape, Utf8LengthAcceptsValidSequencesOnly) {
  EXPECT_EQ(utf8_length("a", 0), 1u);
  EXPECT_EQ(utf8_length("\xc3\xa9", 0), 2u);          // é
  EXPECT_EQ(utf8_length("\xe2\x82\xac", 0), 3u);      // €
  EXPECT_EQ(utf8_length("\xf0\x9f\x98\x80", 0), 4u);  // an emoji
  EXPECT_EQ(utf8_length("\xc0\xaf", 0), 0u);          // overlong
  EXPECT_EQ(utf8_length("\xed\xa0\x80", 0), 0u);      // a surrogate
  EXPECT_EQ(utf8_length("\xe2\x82", 0), 0u);          // truncated
  EXPECT_EQ(utf8_length("\x80", 0), 0u);              // a stray continuation byte
}

TEST(TextEscape, JsonQuotesEscapesAndReplacesInvalidBytes) {
  EXPECT_EQ(json("a\"b\\c\n\t\r"), R"("a\"b\\c\n\t\r")");
  EXPECT_EQ(json(std::string_view("\x01", 1)), R"("\u0001")");
  EXPECT_EQ(json("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  EXPECT_EQ(json("x\xffy\xe2\x82"), "\"x\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbd\"");
}

TEST(TextEscape, CustomAsciiRuleSeesOnlyAsciiBytes) {
  std::string out;
  append_utf8_escaped(out, "<\xc3\xa9\xfe>", [](std::string& o, char c) { o += c == '<' ? "&lt;" : std::string(1, c); });
  EXPECT_EQ(out, "&lt;\xc3\xa9\xef\xbf\xbd>");
}

}  // namespace
}  // namespace tracecache
