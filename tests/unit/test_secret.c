/* test_secret.c - Standard Webhooks signing against the specification's published example
 * (v1, HMAC) and the reference Go library's asymmetric test vector (v1a, Ed25519). */
#include "testlib.h"

#include "secret.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

/* The example from the Standard Webhooks specification and its reference libraries. */
static void sign_matches_spec_vector(void **state)
{
    char sig[SECRET_SIGNATURE_MAX];
    pgp_error err = {{0}};
    const char *body = "{\"test\": 2432232314}";
    assert_int_equal(secret_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                 "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, strlen(body),
                                 sig, &err),
                     0);
    assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

/* Signs the specification's example with k (a parsed copy of its secret) into sig. */
static void sign_spec(const secret_key *k, char sig[SECRET_SIGNATURE_MAX])
{
    pgp_error err = {{0}};
    const char *body = "{\"test\": 2432232314}";
    assert_int_equal(secret_key_sign(k, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body,
                                     strlen(body), sig, &err),
                     0);
}

static void *sign_spec_thread(void *arg)
{
    char *sig = arg;
    secret_key *k = NULL;
    pgp_error err = {{0}};
    if (secret_key_parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &k, &err) == 0)
        sign_spec(k, sig);
    secret_key_free(k);
    return NULL;
}

/* A signing thread keeps its HMAC context keyed with the last key: signatures with the same key
 * again, with other keys in between, with a key parsed where a freed one was, and on another
 * thread, are each their own key's. */
static void hmac_context_reuse_keeps_keys_apart(void **state)
{
    const char *spec = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    const char *other_secret = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY";
    secret_key *k = NULL, *other = NULL;
    pgp_error err = {{0}};
    char sig[SECRET_SIGNATURE_MAX], other_sig[SECRET_SIGNATURE_MAX], again[SECRET_SIGNATURE_MAX];
    assert_int_equal(secret_key_parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &k, &err), 0);
    assert_int_equal(secret_key_parse(other_secret, &other, &err), 0);
    for (int i = 0; i < 3; i++) {
        sign_spec(k, sig);
        assert_string_equal(sig, spec);
    }
    sign_spec(other, other_sig);
    assert_string_not_equal(other_sig, spec);
    sign_spec(k, sig);
    assert_string_equal(sig, spec);
    /* The other key again, after a freed key's place was taken by a new parse. */
    secret_key_free(k);
    assert_int_equal(secret_key_parse(other_secret, &k, &err), 0);
    sign_spec(k, again);
    assert_string_equal(again, other_sig);
    secret_key_free(k);
    assert_int_equal(secret_key_parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &k, &err), 0);
    sign_spec(k, sig);
    assert_string_equal(sig, spec);
    /* Another thread has its own context (freed when it ends). */
    char tsig[SECRET_SIGNATURE_MAX] = "";
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, sign_spec_thread, tsig), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_string_equal(tsig, spec);
    sign_spec(other, again);
    assert_string_equal(again, other_sig);
    secret_key_free(k);
    secret_key_free(other);
}

static void sign_changes_with_every_input(void **state)
{
    const char *secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    char a[SECRET_SIGNATURE_MAX], b[SECRET_SIGNATURE_MAX];
    pgp_error err = {{0}};
    assert_int_equal(secret_sign(secret, "msg_1", 1, "{}", 2, a, &err), 0);
    assert_int_equal(secret_sign(secret, "msg_2", 1, "{}", 2, b, &err), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(secret_sign(secret, "msg_1", 2, "{}", 2, b, &err), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(secret_sign(secret, "msg_1", 1, "[]", 2, b, &err), 0);
    assert_string_not_equal(a, b);
}

static void sign_rejects_bad_secret_without_echoing_it(void **state)
{
    char sig[SECRET_SIGNATURE_MAX];
    pgp_error err = {{0}};
    assert_int_not_equal(secret_sign("nope_c2VjcmV0c2VjcmV0", "m", 1, "{}", 2, sig, &err), 0);
    tl_assert_contains(err.msg, "not a valid whsec_");
    assert_null(strstr(err.msg, "c2VjcmV0c2VjcmV0"));
    assert_int_not_equal(secret_sign("whsec_!!!!", "m", 1, "{}", 2, sig, &err), 0);
    /* Refused: lenient base64 would make these an empty or garbled key. */
    const char *lenient[] = {"whsec_====",
                             "whsec_A===",
                             "whsec_AA==",
                             "whsec_QU=D",
                             "whsec_QUJD", /* valid base64 but a 3-byte key */
                             "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS=w"};
    for (size_t i = 0; i < sizeof lenient / sizeof lenient[0]; i++)
        assert_int_not_equal(secret_sign(lenient[i], "m", 1, "{}", 2, sig, &err), 0);
}

static void generated_secrets_are_valid_and_distinct(void **state)
{
    char a[64], b[64], sig[SECRET_SIGNATURE_MAX];
    pgp_error err = {{0}};
    assert_int_equal(secret_generate(a, sizeof a, &err), 0);
    assert_int_equal(secret_generate(b, sizeof b, &err), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(strncmp(a, "whsec_", 6), 0);
    assert_int_equal(strlen(a), 6 + 44);
    assert_int_equal(secret_sign(a, "m", 1, "{}", 2, sig, &err), 0);
    assert_int_not_equal(secret_generate(a, 10, &err), 0);
}

/* The reference Go library's TestAsymmetricWebhookSign (standard-webhooks PR #253): the seed is
 * the ASCII "TESTSIGNINGKEYDONOTUSETHISFORANY". The same signature comes out of
 * `openssl pkeyutl -sign -rawin` with that seed, and the public key out of `openssl pkey`. */
#define ED_SEED   "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
#define ED_SECRET "whsk_" ED_SEED
#define ED_PUBLIC "whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="
#define ED_SIG                                                                                     \
    "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag=="

static void ed25519_sign_matches_reference_vector(void **state)
{
    char sig[SECRET_SIGNATURE_MAX];
    pgp_error err = {{0}};
    const char *body = "{\"test\": 2432232314}";
    assert_int_equal(secret_sign(ED_SECRET, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body,
                                 strlen(body), sig, &err),
                     0);
    assert_string_equal(sig, ED_SIG);
    assert_int_equal(strlen(sig), 4 + 88); /* the longest signature fits the buffer */
    assert_true(strlen(sig) < SECRET_SIGNATURE_MAX);

    /* Parsed once, signed twice: the same answer (Ed25519 is deterministic). */
    secret_key *k = NULL;
    assert_int_equal(secret_key_parse(ED_SECRET, &k, &err), 0);
    assert_int_equal(secret_key_type(k), SECRET_ED25519);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(secret_key_sign(k, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body,
                                         strlen(body), sig, &err),
                         0);
        assert_string_equal(sig, ED_SIG);
    }
    char pub[SECRET_PUBLIC_KEY_MAX];
    assert_int_equal(secret_key_public(k, pub, &err), 0);
    assert_string_equal(pub, ED_PUBLIC);
    secret_key_free(k);

    /* A whsec_ secret has no public key. */
    assert_int_equal(secret_key_parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &k, &err), 0);
    assert_int_equal(secret_key_type(k), SECRET_HMAC);
    assert_int_not_equal(secret_key_public(k, pub, &err), 0);
    secret_key_free(k);
}

/* Verifies a v1a signature with OpenSSL directly (not secret.c) under the raw public key. */
static int ed25519_verifies(const char *whpk, const char *msg, const char *v1a)
{
    unsigned char pub[33], sig[66];
    if (strncmp(whpk, "whpk_", 5) != 0 || strncmp(v1a, "v1a,", 4) != 0 ||
        EVP_DecodeBlock(pub, (const unsigned char *)whpk + 5, (int)strlen(whpk + 5)) != 33 ||
        EVP_DecodeBlock(sig, (const unsigned char *)v1a + 4, (int)strlen(v1a + 4)) != 66)
        return 0;
    EVP_PKEY *pk = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, 32);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = pk && ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pk) == 1 &&
             EVP_DigestVerify(ctx, sig, 64, (const unsigned char *)msg, strlen(msg)) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(pk);
    return ok;
}

static void ed25519_generated_keys_round_trip(void **state)
{
    char a[64], b[64], sig[SECRET_SIGNATURE_MAX], pub[SECRET_PUBLIC_KEY_MAX];
    pgp_error err = {{0}};
    assert_int_equal(secret_generate_type(SECRET_ED25519, a, sizeof a, &err), 0);
    assert_int_equal(secret_generate_type(SECRET_ED25519, b, sizeof b, &err), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(strncmp(a, "whsk_", 5), 0);
    assert_int_equal(strlen(a), 5 + 44);
    secret_key *k = NULL;
    assert_int_equal(secret_key_parse(a, &k, &err), 0);
    assert_int_equal(secret_key_public(k, pub, &err), 0);
    assert_int_equal(strlen(pub), 5 + 44);
    const char *body = "{\"event\":\"x\",\"n\":1}";
    assert_int_equal(secret_key_sign(k, "msg_42", 1700000000, body, strlen(body), sig, &err), 0);
    assert_true(ed25519_verifies(pub, "msg_42.1700000000.{\"event\":\"x\",\"n\":1}", sig));
    /* Any change to the signed content breaks it. */
    assert_false(ed25519_verifies(pub, "msg_43.1700000000.{\"event\":\"x\",\"n\":1}", sig));
    assert_false(ed25519_verifies(pub, "msg_42.1700000001.{\"event\":\"x\",\"n\":1}", sig));
    assert_false(ed25519_verifies(pub, "msg_42.1700000000.{\"event\":\"x\",\"n\":2}", sig));
    assert_false(ed25519_verifies(ED_PUBLIC, "msg_42.1700000000.{\"event\":\"x\",\"n\":1}", sig));
    secret_key_free(k);

    /* A body larger than the stack buffer takes the heap path: same scheme. */
    size_t big_len = 100000;
    char *big = malloc(big_len + 1);
    assert_non_null(big);
    memset(big, 'x', big_len);
    big[big_len] = '\0';
    assert_int_equal(secret_sign(a, "msg_big", 5, big, big_len, sig, &err), 0);
    char *msg = malloc(big_len + 32);
    assert_non_null(msg);
    snprintf(msg, big_len + 32, "msg_big.5.%s", big);
    assert_int_equal(secret_key_parse(a, &k, &err), 0);
    assert_int_equal(secret_key_public(k, pub, &err), 0);
    secret_key_free(k);
    assert_true(ed25519_verifies(pub, msg, sig));
    free(msg);
    free(big);

    /* whsec_ still the default kind. */
    assert_int_equal(secret_generate_type(SECRET_HMAC, a, sizeof a, &err), 0);
    assert_int_equal(strncmp(a, "whsec_", 6), 0);
    assert_int_not_equal(secret_generate_type(SECRET_ED25519, a, 40, &err), 0);
}

static void ed25519_bad_keys_refused_without_echoing_them(void **state)
{
    char sig[SECRET_SIGNATURE_MAX];
    pgp_error err = {{0}};
    const char *bad[] = {
        "whsk_",
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JB",         /* 30 bytes: too short */
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlkK",     /* 33 bytes, no padding */
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk",      /* padding left out */
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=AAAA", /* trailing data */
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTl!=",     /* not base64 */
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk_",     /* base64url */
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlm=",     /* non-zero unused bits */
        "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTllmU3h6Dt1JKqLSahf2FBSTeius6i4rdBVBKUlrbjxz+"
        "A==", /* 64 bytes (seed + public key, as some libraries keep it): not the format */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(secret_sign(bad[i], "m", 1, "{}", 2, sig, &err), -EINVAL);
        tl_assert_contains(err.msg, "whsk_ must be followed by base64 of a 32-byte Ed25519 seed");
        if (strlen(bad[i]) > 12)
            assert_null(strstr(err.msg, bad[i] + 5));
        /* The check without the key (the dispatcher's at load) says the same. */
        pgp_error cerr = {{0}};
        assert_int_equal(secret_check(bad[i], &cerr), -EINVAL);
        assert_string_equal(cerr.msg, err.msg);
    }
    /* The public key where the secret belongs: its own message. */
    assert_int_equal(secret_sign("whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g=", "m", 1, "{}",
                                 2, sig, &err),
                     -EINVAL);
    tl_assert_contains(err.msg, "a whpk_ public key cannot sign");
    assert_null(strstr(err.msg, "ZlN4eg7d"));
    /* An Ed25519 seed under the HMAC prefix is a (valid) 32-byte HMAC key, and vice versa the
     * HMAC example is not an Ed25519 seed. */
    assert_int_equal(secret_sign("whsec_" ED_SEED, "m", 1, "{}", 2, sig, &err), 0);
    assert_int_equal(strncmp(sig, "v1,", 3), 0);
    assert_int_equal(
        secret_sign("whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, "{}", 2, sig, &err), -EINVAL);
    assert_int_equal(secret_check("whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g=", &err),
                     -EINVAL);
    tl_assert_contains(err.msg, "a whpk_ public key cannot sign");
    assert_int_equal(secret_check("whsec_" ED_SEED, &err), 0);
    assert_int_equal(secret_check("whsk_" ED_SEED, &err), 0);
    assert_int_equal(secret_check("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &err), 0);
    assert_int_equal(secret_check("whsec_not base64", &err), -EINVAL);
    tl_assert_contains(err.msg, "not a valid whsec_ base64 value");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sign_matches_spec_vector),
        cmocka_unit_test(hmac_context_reuse_keeps_keys_apart),
        cmocka_unit_test(sign_changes_with_every_input),
        cmocka_unit_test(sign_rejects_bad_secret_without_echoing_it),
        cmocka_unit_test(generated_secrets_are_valid_and_distinct),
        cmocka_unit_test(ed25519_sign_matches_reference_vector),
        cmocka_unit_test(ed25519_generated_keys_round_trip),
        cmocka_unit_test(ed25519_bad_keys_refused_without_echoing_them),
    };
    return TL_RUN(tests, NULL, NULL);
}
