// Stop conditions: stop strings across token boundaries (checked against a whole-text oracle on
// random splits), stop token ids, max_tokens, and the order in which they are checked.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/sampling/stop.h"
#include "gtest/gtest.h"

namespace lockstep::sampling {
namespace {

struct Streamed {
  std::string emitted;
  bool stopped = false;
};

// Pushes the pieces in order; flushes at the end when no stop string fired.
Streamed Stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopStringMatcher m(stops);
  Streamed out;
  for (const std::string& piece : pieces) {
    StopStringMatcher::Step step = m.Push(piece);
    out.emitted += step.emit;
    if (step.stopped) {
      out.stopped = true;
      return out;
    }
  }
  out.emitted += m.Flush();
  return out;
}

// Whole-text oracle for the documented rule: walk the text byte by byte; at the first byte where
// some stop string ends, stop (the longest one ending there wins) and emit what precedes it.
Streamed Oracle(const std::vector<std::string>& stops, const std::string& text) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best = 0;
    for (const std::string& s : stops) {
      if (s.size() <= end && s.size() > best && text.compare(end - s.size(), s.size(), s) == 0) {
        best = s.size();
      }
    }
    if (best > 0) return {text.substr(0, end - best), true};
  }
  return {text, false};
}

TEST(StopString, MatchInsideOnePiece) {
  const Streamed r = Stream({"END"}, {"Hello END world"});
  EXPECT_EQ(r.emitted, "Hello ");
  EXPECT_TRUE(r.stopped);
}

TEST(StopString, MatchAcrossTokenBoundariesHoldsBackThePrefix) {
  StopStringMatcher m({"END"});
  StopStringMatcher::Step s = m.Push("Hel");
  EXPECT_EQ(s.emit, "Hel");
  s = m.Push("lo E");  // "E" could start "END": held back
  EXPECT_EQ(s.emit, "lo ");
  EXPECT_EQ(m.held(), "E");
  s = m.Push("N");
  EXPECT_EQ(s.emit, "");
  EXPECT_EQ(m.held(), "EN");
  s = m.Push("D and more");
  EXPECT_EQ(s.emit, "");
  EXPECT_TRUE(s.stopped);
  // After a stop nothing more comes out.
  s = m.Push("x");
  EXPECT_EQ(s.emit, "");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopString, FalseStartIsReleased) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.Push("E").emit, "");
  EXPECT_EQ(m.Push("X").emit, "EX");
  EXPECT_EQ(m.Push("EN").emit, "");
  EXPECT_EQ(m.Flush(), "EN");  // end of stream: a prefix that never completed is real text
}

TEST(StopString, SelfOverlappingStopString) {
  // "abab" in "abaabab...": the held "aba" fails at "a", but its suffix "a" is a new start.
  const Streamed r = Stream({"abab"}, {"a", "b", "a", "a", "b", "a", "b", "z"});
  EXPECT_EQ(r.emitted, "aba");
  EXPECT_TRUE(r.stopped);
}

TEST(StopString, FirstToEndWinsThenLongest) {
  // "b" ends before "abc" does, whether the text comes in one piece or byte by byte.
  EXPECT_EQ(Stream({"abc", "b"}, {"xabc"}).emitted, "xa");
  EXPECT_EQ(Stream({"abc", "b"}, {"x", "a", "b", "c"}).emitted, "xa");
  // Both end at the same byte: the longer one wins (it starts earlier).
  EXPECT_EQ(Stream({"c", "abc"}, {"xabc"}).emitted, "x");
}

TEST(StopString, MultiByteUtf8AcrossPieces) {
  // "é" is C3 A9; the token boundary falls inside it.
  const Streamed r = Stream({"\xC3\xA9"}, {"caf\xC3", "\xA9!"});
  EXPECT_EQ(r.emitted, "caf");
  EXPECT_TRUE(r.stopped);
}

TEST(StopString, AnySplitGivesTheSameBytesAsTheWholeTextOracle) {
  // Random texts over a small alphabet (so stop strings and their prefixes occur often),
  // random stop sets, random cuts into pieces (including empty pieces).
  const uint64_t seed = 0x570b;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto random_string = [&](size_t len) {
    std::string s;
    for (size_t i = 0; i < len; ++i) s.push_back("abc"[rng() % 3]);
    return s;
  };
  int stopped = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    for (size_t k = 0, n = 1 + rng() % 3; k < n; ++k) stops.push_back(random_string(1 + rng() % 4));
    const std::string text = random_string(rng() % 40);
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min<size_t>(rng() % 5, text.size() - at);
      pieces.push_back(text.substr(at, len));
      at += len;
    }
    const Streamed want = Oracle(stops, text);
    const Streamed got = Stream(stops, pieces);
    ASSERT_EQ(got.emitted, want.emitted) << "trial " << trial << " text " << text;
    ASSERT_EQ(got.stopped, want.stopped) << "trial " << trial << " text " << text;
    stopped += got.stopped;
  }
  std::printf("3000 trials, %d stopped on a stop string\n", stopped);
  EXPECT_GT(stopped, 300);  // the property was exercised on both outcomes
  EXPECT_LT(stopped, 2700);
}

SamplingParams StopParams() {
  SamplingParams p;
  p.stop_token_ids = {2};
  p.stop = {"</s>"};
  p.max_tokens = 4;
  return p;
}

TEST(StopConditions, StopTokenIsNotEmittedAndHeldTextIsFlushed) {
  StopConditions c(StopParams());
  EXPECT_EQ(c.OnToken(10, "Hi <").emit, "Hi ");  // "<" may start "</s>"
  const StopConditions::Step s = c.OnToken(2, "<eos>");
  EXPECT_EQ(s.emit, "<");
  EXPECT_EQ(s.finish, FinishReason::kStopToken);
  EXPECT_EQ(OpenAIFinishReason(s.finish), "stop");
  // Finished: later calls return nothing and the same reason.
  EXPECT_EQ(c.OnToken(11, "more").emit, "");
  EXPECT_EQ(c.OnToken(11, "more").finish, FinishReason::kStopToken);
  EXPECT_EQ(c.generated(), 2);
}

TEST(StopConditions, StopStringAcrossTokens) {
  StopConditions c(StopParams());
  EXPECT_EQ(c.OnToken(10, "ok</").emit, "ok");
  const StopConditions::Step s = c.OnToken(11, "s> tail");
  EXPECT_EQ(s.emit, "");
  EXPECT_EQ(s.finish, FinishReason::kStopString);
  EXPECT_EQ(OpenAIFinishReason(s.finish), "stop");
}

TEST(StopConditions, MaxTokensFlushesHeldText) {
  StopConditions c(StopParams());
  EXPECT_EQ(c.OnToken(10, "a").finish, FinishReason::kNone);
  EXPECT_EQ(c.OnToken(10, "b").finish, FinishReason::kNone);
  EXPECT_EQ(c.OnToken(10, "c").finish, FinishReason::kNone);
  const StopConditions::Step s = c.OnToken(10, "d</");  // the 4th token: length
  EXPECT_EQ(s.emit, "d</");
  EXPECT_EQ(s.finish, FinishReason::kMaxTokens);
  EXPECT_EQ(OpenAIFinishReason(s.finish), "length");
  EXPECT_EQ(OpenAIFinishReason(FinishReason::kNone), "");
}

TEST(StopConditions, StopTokenThenStopStringThenLengthPrecedence) {
  // On the last allowed token, a stop token wins over length.
  SamplingParams p = StopParams();
  p.max_tokens = 1;
  EXPECT_EQ(StopConditions(p).OnToken(2, "").finish, FinishReason::kStopToken);
  // A stop string completing on the last allowed token also wins over length.
  EXPECT_EQ(StopConditions(p).OnToken(7, "</s>").finish, FinishReason::kStopString);
  EXPECT_EQ(StopConditions(p).OnToken(7, "x").finish, FinishReason::kMaxTokens);
}

}  // namespace
}  // namespace lockstep::sampling
