#include "core/escape.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(EscapeBytesTest, PrintableAsciiAndUtf8StayReadable) {
  EXPECT_EQ(EscapeBytes("abc 123"), "abc 123");
  EXPECT_EQ(EscapeBytes("zeta\xc3\xa9\xf0\x9f\x98\x80"), "zeta\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(EscapeBytes("a\\b"), "a\\\\b");
}

TEST(EscapeBytesTest, ControlsAndMalformedUtf8AreHex) {
  EXPECT_EQ(EscapeBytes(std::string_view("\x01\x00\x7f", 3)), "\\x01\\x00\\x7f");
  EXPECT_EQ(EscapeBytes("\x1b[31m"), "\\x1b[31m");  // a terminal escape sequence
  EXPECT_EQ(EscapeBytes("a\tb\r\n"), "a\\tb\\r\\n");
  EXPECT_EQ(EscapeBytes("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(EscapeBytes("\xc3"), "\\xc3");              // truncated sequence
  EXPECT_EQ(EscapeBytes("\xc0\xaf"), "\\xc0\\xaf");     // overlong
  EXPECT_EQ(EscapeBytes("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate
  EXPECT_EQ(EscapeBytes("\xc2\x9b"), "\\xc2\\x9b");     // C1 control (CSI)
}

TEST(EscapeBytesTest, LongInputIsCut) {
  EXPECT_EQ(EscapeBytes(std::string(100, 'x'), 4), "xxxx...");
  EXPECT_EQ(EscapeBytes("abcd", 4), "abcd");
}

}  // namespace
}  // namespace tessera
