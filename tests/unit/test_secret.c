/* test_secret.c - Standard Webhooks signing against the specification's published example. */
#include "testlib.h"

#include "secret.h"

#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sign_matches_spec_vector),
        cmocka_unit_test(sign_changes_with_every_input),
        cmocka_unit_test(sign_rejects_bad_secret_without_echoing_it),
        cmocka_unit_test(generated_secrets_are_valid_and_distinct),
    };
    return TL_RUN(tests, NULL, NULL);
}
