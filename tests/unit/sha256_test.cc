// engine/core/sha256: the FIPS 180-4 example vectors (published digests), streaming in random
// pieces == one shot, and files hashed against Python's hashlib.
#include "engine/core/sha256.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace lockstep::core {
namespace {

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingInRandomPiecesEqualsOneShot) {
  std::mt19937 rng(7);
  for (size_t n : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 128u, 1000u, 70001u}) {
    std::string data(n, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    Sha256 s;
    for (size_t off = 0; off < n;) {
      const size_t take = std::min<size_t>(n - off, rng() % 130);
      s.Update(std::string_view(data).substr(off, take));
      off += take;
    }
    EXPECT_EQ(s.HexDigest(), Sha256Hex(data)) << n << " bytes";
  }
}

TEST(Sha256, FileMatchesPythonHashlib) {
  const std::string path = ::testing::TempDir() + "/sha256_test.bin";
  std::mt19937 rng(11);
  std::string data(3 * (1 << 20) + 77, '\0');  // more than the 1 MiB read piece
  for (char& c : data) c = static_cast<char>(rng());
  std::ofstream(path, std::ios::binary).write(data.data(), data.size());
  auto got = Sha256OfFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::string cmd =
      "python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],\"rb\").read())"
      ".hexdigest())' " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096] = {};
  const size_t n = fread(buf, 1, sizeof(buf) - 1, p);
  ASSERT_EQ(pclose(p), 0) << buf;
  ASSERT_EQ(n, 65u) << buf;
  EXPECT_EQ(*got, std::string(buf, 64));
  std::filesystem::remove(path);
  auto missing = Sha256OfFile(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find(path), std::string::npos);
}

}  // namespace
}  // namespace lockstep::core
