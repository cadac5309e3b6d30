/*  config_words.h — the configuration constructors give a code (*err) and leave the words in
    shoal_last_error_detail(); the configuration tests read the words, so these wrappers copy them
    into a buffer ("" on success), and fail the test when the code and the result disagree.
*/
#ifndef SHOAL_TEST_CONFIG_WORDS_H
#define SHOAL_TEST_CONFIG_WORDS_H

#include "ddata.h"

shoal_config_t *parse_words(const char *text, char *why, size_t cap);
shoal_config_t *load_words(const char *path, char *why, size_t cap);

#endif
