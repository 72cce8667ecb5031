# SPDX-License-Identifier: MIT
# A mutant is a patch on a copy of the headers in the build tree (the public headers
# hold no test-only switches):
#   cmake -DSOURCE=<include/> -DDEST=<copy> -DSPEC=<tests/mutants/NAME.cmake>
#         -DSTAMP=<file> -P mutate.cmake
# The spec sets `header` (a path under SOURCE: include/, or the spec's `root`, which
# hotpath_mutant_headers() copies instead) and pairs old_1/new_1, old_2/new_2...
# applied in turn; each old_K must occur exactly once in the header as it then is, so
# that a mutant cannot rot into the unmutated code when the header changes.
include(${SPEC})
file(REMOVE_RECURSE ${DEST})
file(COPY ${SOURCE}/ DESTINATION ${DEST})
file(READ ${DEST}/${header} text)
set(k 1)
while(DEFINED old_${k})
  string(REPLACE "${old_${k}}" "" rest "${text}")
  string(LENGTH "${text}" text_length)
  string(LENGTH "${rest}" rest_length)
  string(LENGTH "${old_${k}}" old_length)
  math(EXPR occurrences "(${text_length} - ${rest_length}) / ${old_length}")
  if(NOT occurrences EQUAL 1)
    message(FATAL_ERROR "mutant ${SPEC}: old_${k} occurs ${occurrences} times in ${header} "
                        "(must be once):\n${old_${k}}")
  endif()
  string(REPLACE "${old_${k}}" "${new_${k}}" text "${text}")
  math(EXPR k "${k} + 1")
endwhile()
if(k EQUAL 1)
  message(FATAL_ERROR "mutant ${SPEC}: no old_1")
endif()
file(WRITE ${DEST}/${header} "${text}")
file(TOUCH ${STAMP})
