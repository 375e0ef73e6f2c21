// Compiles nothing: the target sparqlab_exe_pch exists for its precompiled libtorch headers
// (app/CMakeLists.txt), which the executables without Qt share.
