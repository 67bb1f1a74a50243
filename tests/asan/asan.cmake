# asan.cmake — the sanitizer build's test selection (label `asan`) and environment; included by
# CMakeLists.txt after every folder's .cmake under tests/. `make test-asan` configures build-asan with
# -DRRFP_SANITIZE=ON -DRRFP_CUDA=OFF and runs `ctest -L asan` there (.ci/run).
#
# The selection: the unit tests, the input-handling and CLI tests, and pipeline runs of 2 ranks (the
# transport, a SIGTERM'd pp 2 training job and its resume, a pp 2 job whose trace cannot be written),
# each a few seconds under ASan (pipeline_equiv_np2 and train_synthetic_e2e take 45 s each there: left
# to the normal build). Left out: torch / node / browser peers (another process does the work), fuzzers (their own
# ASan build), gpu, the CUDA emulation (its own checks), slow and 4..8-rank tests (CI time).
#
# A sanitizer report fails the test that caused it, and is never lost:
# - halt_on_error=1 and -fno-sanitize-recover=undefined: the first report ends the process with exit 86,
#   a status no test expects (tests expect 0, 1, 2, 77 or 128 + a signal);
# - log_path: every report (ASan, UBSan, LeakSanitizer) goes to build-asan/sanitizer-reports/TEST.PID,
#   whatever the test does with the program's stderr; the fixture test `asan_reports_none` runs after
#   the selection and fails listing every report and the test that wrote it (a test that only checks
#   "exit status != 0" cannot hide one). GCC's libubsan ignores log_path beside libasan:
#   tests/asan/ubsan_log_path.c, linked into every target of this build, sets it at start-up.
# Leaks: detect_leaks=1 with tests/asan/lsan.supp, which suppresses Open MPI's own start-up allocations
# only (MPI_Init's tables live to the end of the process; its plug-ins are dlclose'd at MPI_Finalize, so
# fast_unwind_on_malloc=0 is needed for their stacks to reach libmpi and match). Our leaks still fail.
if(NOT RRFP_SANITIZE)
  return()
endif()
set(RRFP_ASAN_TESTS
    # unit
    engine_philox engine_init engine_lr engine_sumsq engine_step_end engine_params engine_expf engine_backend_cpu
    engine_backend_unknown engine_ce_bad_target engine_params_duplicate engine_ops_fd engine_ops_bf16 engine_quant
    engine_params_forward_only_grad engine_params_forward_only_optim
    model_fd model_fd_anyres model_split_bitwise model_pipeline_stages model_freeze model_bad_budget model_bad_image_id
    model_forward_only model_forward_only_clip
    model_bad_target model_bad_grid model_bad_pos model_bad_overlap
    tp_split tp_init tp_ce tp_lm tp_vit tp_proj tp_embed partition sched_core trace_writer tokenizer_unit attention_table
    sim_core plan_core
    report_unit safetensors_selftest safetensors_read checkpoint_unit recipe_unit data_packing_quality data_manifest_lines vit_lora_fd
    layout_fit_chain
    # input handling and the command line
    data_roundtrip data_pack_errors data_pack_workers data_anyres_ref data_anyres_pillow data_cmyk_gif tokenizer_cli_missing_file tokenizer_cli_usage tokenizer_cli
    recipe_cli_bad_key recipe_cli_bad_set recipe_print_roundtrip recipe_dry_run_7b tensors_diff sched_cli trace_steps
    cli_help cli_unknown_command cli_version cli_contract cli_first_mistakes train_guard_lock train_guard_memory train_guard_stale
    train_guard_threads train_guard_demo train_freeze_bad_key train_init_from_missing train_tp_refused
    train_eval_packing silent_answers hostile_shapes hostile_readers write_errors_metrics write_errors_log write_errors_torn
    write_errors_full write_errors_trace write_errors_metrics_mpi stale_zombie outputs_guard_generate
    outputs_guard_resume outputs_guard_images outputs_guard_eval outputs_guard_report outputs_guard_export
    outputs_guard_pack outputs_guard_tokenizer outputs_guard_trace train_guard_ckptlock train_rundir_incomplete
    disk_full_commands disk_full_train
    # pipeline parallel, 2 ranks
    transport_np2 transport_lost_peer train_signal_mpi
    # what differs when CUDA is not compiled in (this build is the CPU-only build): the CUDA backend's
    # refusal, "built without CUDA", from the engine and the command line
    engine_backend_cuda_missing cuda_select)
# What those tests run: `make build-asan` builds only the executables the selection's commands name
# (tests/asan/targets.py reads them from the generated CTestTestfile.cmake: no list to keep here).
set(RRFP_ASAN_REPORTS ${CMAKE_BINARY_DIR}/sanitizer-reports)
add_test(NAME asan_reports_clear COMMAND bash -c "rm -rf \"$0\" && mkdir -p \"$0\"" ${RRFP_ASAN_REPORTS})
add_test(NAME asan_reports_none
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/asan/reports_none.sh ${RRFP_ASAN_REPORTS})
set_tests_properties(asan_reports_clear PROPERTIES FIXTURES_SETUP asan_reports LABELS asan)
set_tests_properties(asan_reports_none PROPERTIES FIXTURES_CLEANUP asan_reports LABELS asan)
# The tests of the selection that start Open MPI (mpirun, or rrfp-mm's train / eval / generate / report / export,
# which call MPI_Init): LeakSanitizer matches tests/asan/lsan.supp against Open MPI's start-up allocations only with
# the slow unwinder (fast_unwind_on_malloc=0: its plug-ins have no frame pointers), which costs every malloc a DWARF
# unwind, 2-8x the run time of an allocation-heavy test (tokenizer_unit: 26 s against 3.5 s). Every other test keeps
# the fast unwinder. A test missing here that does start Open MPI fails with "detected memory leaks" from an
# "<unknown module>" (asan_reports_none names it): add it.
set(RRFP_ASAN_MPI_TESTS
    transport_np2 transport_lost_peer train_signal_mpi write_errors_metrics_mpi train_tp_refused train_guard_lock
    train_guard_ckptlock train_guard_memory train_guard_stale train_guard_threads train_guard_demo
    train_rundir_incomplete train_eval_packing train_freeze_bad_key write_errors_metrics write_errors_log
    write_errors_torn write_errors_full stale_zombie outputs_guard_generate outputs_guard_resume outputs_guard_images
    outputs_guard_eval outputs_guard_report outputs_guard_export outputs_guard_pack outputs_guard_trace hostile_shapes
    hostile_readers
    cli_first_mistakes disk_full_commands disk_full_train)
foreach(t ${RRFP_ASAN_TESTS})
  if(NOT TEST ${t})
    message(FATAL_ERROR "tests/asan/asan.cmake: no test named '${t}' (renamed? update RRFP_ASAN_TESTS)")
  endif()
  set(common "halt_on_error=1:exitcode=86:log_path=${RRFP_ASAN_REPORTS}/${t}")
  if(t IN_LIST RRFP_ASAN_MPI_TESTS)
    set(unwind 0)
  else()
    set(unwind 1)
  endif()
  set_property(TEST ${t} APPEND PROPERTY LABELS asan)
  set_property(TEST ${t} APPEND PROPERTY FIXTURES_REQUIRED asan_reports)
  set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT
               "ASAN_OPTIONS=${common}:detect_leaks=1:fast_unwind_on_malloc=${unwind}:abort_on_error=0"
               "UBSAN_OPTIONS=${common}:print_stacktrace=1"
               "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/asan/lsan.supp:print_suppressions=0")
endforeach()
