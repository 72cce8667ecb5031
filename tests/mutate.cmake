# SPDX-License-Identifier: MIT
# A mutant as a patch on a copy of the headers in the build tree (the public headers
# hold no test-only switches):
#   cmake -DSOURCE=<include/> -DDEST=<copy> -DHEADER=<path under include/>
#         -DSPEC=<dir holding old.txt and new.txt> -DSTAMP=<file> -P mutate.cmake
# old.txt must occur exactly once in the header, so that a mutant cannot rot into
# the unmutated code when the header changes.
file(REMOVE_RECURSE ${DEST})
file(COPY ${SOURCE}/ DESTINATION ${DEST})
file(READ ${SPEC}/old.txt old)
file(READ ${SPEC}/new.txt new)
file(READ ${DEST}/${HEADER} text)
string(REPLACE "${old}" "" rest "${text}")
string(LENGTH "${text}" text_length)
string(LENGTH "${rest}" rest_length)
string(LENGTH "${old}" old_length)
math(EXPR occurrences "(${text_length} - ${rest_length}) / ${old_length}")
if(NOT occurrences EQUAL 1)
  message(FATAL_ERROR "mutant ${SPEC}: the text to replace occurs ${occurrences} times in "
                      "${HEADER} (must be once):\n${old}")
endif()
string(REPLACE "${old}" "${new}" text "${text}")
file(WRITE ${DEST}/${HEADER} "${text}")
file(TOUCH ${STAMP})
