# report.cmake — `rrfp-mm report`: the HTML writer (no browser), and the page in headless Chromium.
add_executable(test_report tests/runtime/report/test_report.c)
target_link_libraries(test_report PRIVATE rrfp_core)
add_test(NAME report_unit COMMAND test_report ${CMAKE_CURRENT_BINARY_DIR}/report_unit)

# demo data -> pack -> a pipelined, traced run of a small demo.ini (mpirun -np 2) -> eval -> report ->
# Chromium --dump-dom: the curves, recipe table, timeline rects and question cards with decodable JPEG
# data URIs are in the DOM, and the browser logged no console error. Skipped (77) without chromium.
add_test(NAME report_browser
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/runtime/report/report_browser.sh $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/report_browser ${RRFP_MPIRUN})
set_tests_properties(report_browser PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)

# an any-resolution run's report: each held-out card's tiles figure (grid, tower images, original size, positions,
# the paste and the unpadded region) against tests/data/anyres_ref.py; rendered in Chromium when installed
add_test(NAME report_anyres
         COMMAND ${RRFP_PYTHON} ${CMAKE_SOURCE_DIR}/tests/runtime/report/report_anyres.py $<TARGET_FILE:rrfp-mm> ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/report_anyres)
set_tests_properties(report_anyres PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
