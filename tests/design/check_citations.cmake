# Checks that every citation of a design note in the sources and docs resolves.
#
#   cmake -DROOT=<repository> -P tests/design/check_citations.cmake
#
# Design notes live in docs/design/<NAME>.md. The code and docs cite them as
#   "SPARQ.md §3.2", "METHODS.md §3–6", "CONTRACTS.md §2, §3, §3b", "METHODS.md §9.1 and §9.2",
#   "[METHODS.md §4.2](docs/design/METHODS.md)", "[METHODS.md](…) §4.2"
# and cite equations as "Eq. 9", "Eq. 3/11". A section citation resolves when docs/design/NAME.md
# has a heading (a line of #'s) whose number is exactly that number ("## 3. …", "### 3.2 …",
# "#### 4.4.1 …", "## 3b. …", optionally written "§3.2"). A range "§3–6" or "§3.1–3.3" checks
# every number in it; "§1–2.1" checks its two ends. An equation citation resolves when some
# docs/design file defines it, as "(Eq. N)" or "**Eq. N**". A citation of a note that is not in
# docs/design (any upper-case NAME.md followed by §) fails.
#
# Scanned: the repository's files (git ls-files: tracked and untracked-but-not-ignored; without
# git, every file below ROOT) named *.cpp *.cc *.c *.h *.hpp *.cu *.cuh *.inc *.in *.cmake
# CMakeLists.txt *.md, except docs/design itself (unless -DINCLUDE_DESIGN=ON), build*/ and
# hidden folders. -DVERBOSE=ON lists every resolved citation. Fails (FATAL_ERROR) listing each
# unresolved citation as "file:line: citation".
# Needs no compiler; registered in tests/CMakeLists.txt as test_design_citations.

cmake_minimum_required(VERSION 3.16)

if(NOT DEFINED ROOT OR ROOT STREQUAL "")
  message(FATAL_ERROR "check_citations: pass -DROOT=<repository root>")
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
set(design_dir "${ROOT}/docs/design")
if(NOT IS_DIRECTORY "${design_dir}")
  message(FATAL_ERROR "check_citations: ${design_dir} does not exist")
endif()

# The placeholders that keep ';', '[', ']' and '\' from disturbing CMake's list handling.
set(SEMI "<@SEMI@>")
set(BSL "<@BSL@>")
set(LBR "<@LBR@>")
set(RBR "<@RBR@>")

# Reads a file into a list of lines, one element per line (empty lines kept).
function(read_lines path out_var)
  file(READ "${path}" content)
  string(REPLACE "\r" "" content "${content}")
  string(REPLACE "\\" "${BSL}" content "${content}")
  string(REPLACE ";" "${SEMI}" content "${content}")
  string(REPLACE "[" "${LBR}" content "${content}")
  string(REPLACE "]" "${RBR}" content "${content}")
  string(REPLACE "\n" ";" content "${content}")
  set(${out_var} "${content}" PARENT_SCOPE)
endfunction()

# Undoes the placeholders for a message.
function(restore_text text out_var)
  string(REPLACE "${SEMI}" ";" text "${text}")
  string(REPLACE "${BSL}" "\\" text "${text}")
  string(REPLACE "${LBR}" "[" text "${text}")
  string(REPLACE "${RBR}" "]" text "${text}")
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# ---- the design notes: their names, section numbers and equations --------------------------

file(GLOB design_files RELATIVE "${design_dir}" "${design_dir}/*.md")
set(note_names "")
set(equations "")
foreach(f IN LISTS design_files)
  string(REGEX REPLACE "\\.md$" "" name "${f}")
  if(name STREQUAL "README") # the folder's index, not a note
    continue()
  endif()
  list(APPEND note_names "${name}")
  set(sections_${name} "")
  read_lines("${design_dir}/${f}" lines)
  set(in_fence FALSE)
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ ]*(```|~~~)")
      if(in_fence)
        set(in_fence FALSE)
      else()
        set(in_fence TRUE)
      endif()
      continue()
    endif()
    if(NOT in_fence AND line MATCHES "^#+[ \t]+(§ ?)?([0-9]+(\\.[0-9]+)*[a-z]?)\\.?([ \t]|$)")
      list(APPEND sections_${name} "${CMAKE_MATCH_2}")
    endif()
    # Equation definitions: "(Eq. N)" or "**Eq. N**", anywhere in the line.
    set(rest "${line}")
    while(rest MATCHES "(\\(Eq\\. ([0-9]+)\\)|\\*\\*Eq\\. ([0-9]+)\\*\\*)(.*)$")
      if(NOT "${CMAKE_MATCH_2}" STREQUAL "")
        list(APPEND equations "${CMAKE_MATCH_2}")
      else()
        list(APPEND equations "${CMAKE_MATCH_3}")
      endif()
      set(rest "${CMAKE_MATCH_4}")
    endwhile()
  endforeach()
endforeach()
if(equations)
  list(REMOVE_DUPLICATES equations)
endif()

# ---- the files to scan ----------------------------------------------------------------------

find_package(Git QUIET)
set(files "")
set(listed FALSE)
if(GIT_FOUND AND EXISTS "${ROOT}/.git")
  execute_process(
    COMMAND "${GIT_EXECUTABLE}" -C "${ROOT}" ls-files --cached --others --exclude-standard
    OUTPUT_VARIABLE git_out RESULT_VARIABLE git_rc ERROR_QUIET)
  if(git_rc EQUAL 0)
    string(REPLACE ";" "${SEMI}" git_out "${git_out}")
    string(REPLACE "\n" ";" files "${git_out}")
    set(listed TRUE)
  endif()
endif()
if(NOT listed)
  file(GLOB_RECURSE files LIST_DIRECTORIES false RELATIVE "${ROOT}" "${ROOT}/*")
endif()

set(scan "")
foreach(f IN LISTS files)
  if(f STREQUAL "" OR f MATCHES "${SEMI}")
    continue()
  endif()
  if(f MATCHES "^docs/design/" AND NOT INCLUDE_DESIGN)
    continue()
  endif()
  # build*/ folders (at any depth) and hidden folders.
  if(f MATCHES "(^|/)build[^/]*/" OR f MATCHES "(^|/)\\.[^/]+/")
    continue()
  endif()
  if(f MATCHES "\\.(cpp|cc|c|h|hpp|cu|cuh|inc|in|cmake|md|sh)$" OR f MATCHES "(^|/)CMakeLists\\.txt$")
    if(EXISTS "${ROOT}/${f}" AND NOT IS_DIRECTORY "${ROOT}/${f}")
      list(APPEND scan "${f}")
    endif()
  endif()
endforeach()
list(SORT scan)

# ---- checking -------------------------------------------------------------------------------

set(n_resolved 0)
set(files_citing "")
set(failures "")

# Checks one section number `num` of note `name`; `where` is "file:line", `cite` the citation.
macro(check_section name num where cite)
  list(FIND note_names "${name}" _note_at)
  if(_note_at EQUAL -1)
    list(APPEND failures "${where}: ${cite} (no docs/design/${name}.md)")
  else()
    list(FIND sections_${name} "${num}" _sec_at)
    if(_sec_at EQUAL -1)
      list(APPEND failures "${where}: ${cite} (no heading ${num} in docs/design/${name}.md)")
    else()
      math(EXPR n_resolved "${n_resolved} + 1")
      list(APPEND files_citing "${file}")
      if(VERBOSE)
        message("${where}: ${cite}")
      endif()
    endif()
  endif()
endmacro()

# The numbers a range a–b stands for: every number between when both ends have the same
# depth and differ only in the last component (3–6, 3.1–3.3), else the two ends.
function(range_numbers a b out_var)
  set(result "${a}" "${b}")
  string(REGEX MATCH "^(([0-9]+\\.)*)([0-9]+)$" _ "${a}")
  set(pa "${CMAKE_MATCH_1}")
  set(la "${CMAKE_MATCH_3}")
  string(REGEX MATCH "^(([0-9]+\\.)*)([0-9]+)$" _ "${b}")
  set(pb "${CMAKE_MATCH_1}")
  set(lb "${CMAKE_MATCH_3}")
  if(NOT "${la}" STREQUAL "" AND NOT "${lb}" STREQUAL "" AND "${pa}" STREQUAL "${pb}"
     AND la LESS lb AND lb LESS_EQUAL 200)
    set(result "")
    foreach(i RANGE ${la} ${lb})
      list(APPEND result "${pa}${i}")
    endforeach()
  endif()
  set(${out_var} "${result}" PARENT_SCOPE)
endfunction()

# The number pattern: 3, 3.2, 4.4.1, 3b. ("§" is two bytes in UTF-8, so it is repeated as "(§)+".)
set(NUM "([0-9]+(\\.[0-9]+)*)([a-z]*)")
# A note name, then an optional closing backtick or the tail of a Markdown link "](…)", then §.
set(CITE_RE "([A-Z][A-Z0-9_]*)\\.md`?(${RBR}\\([^)]*\\))?[ ,:]*(§)+ ?${NUM}(.*)$")
# A continuation: ", §4", " and §4", " or §4", "&§4"; a range: "–6", "-6", "–§6".
set(LIST_RE "^( ?(,|and|or|&) ?(§)+ ?)${NUM}(.*)$")
set(RANGE_RE "^( ?(–|-) ?(§)* ?)${NUM}(.*)$")
set(EQ_RE "Eqs?\\. ?([0-9]+)(.*)$")
# "Eq. 3/11", "Eqs. 9–10": more equations after the first ("Eq. 9, 16 heads" is not one).
set(EQ_MORE_RE "^( ?(/|–|-) ?(Eq\\. ?)?)([0-9]+)(.*)$")

foreach(file IN LISTS scan)
  file(READ "${ROOT}/${file}" raw)
  if(NOT raw MATCHES "§|Eqs?\\. ?[0-9]")
    continue()
  endif()
  read_lines("${ROOT}/${file}" lines)
  set(lineno 0)
  foreach(line IN LISTS lines)
    math(EXPR lineno "${lineno} + 1")
    if(NOT line MATCHES "§|Eqs?\\. ?[0-9]")
      continue()
    endif()
    set(where "${file}:${lineno}")

    # Section citations.
    set(rest "${line}")
    while(rest MATCHES "${CITE_RE}")
      set(name "${CMAKE_MATCH_1}")
      set(num "${CMAKE_MATCH_4}")
      set(suffix "${CMAKE_MATCH_6}")
      set(rest "${CMAKE_MATCH_7}")
      # A single letter after the number is part of it (CONTRACTS.md §3b); a word is not.
      string(LENGTH "${suffix}" suffix_len)
      if(suffix_len EQUAL 1)
        set(num "${num}${suffix}")
      endif()
      set(cite "${name}.md §${num}")
      set(prev "${num}")
      check_section("${name}" "${num}" "${where}" "${cite}")
      # Continuations naming the same note.
      while(TRUE)
        if(rest MATCHES "${LIST_RE}")
          set(num "${CMAKE_MATCH_4}")
          set(suffix "${CMAKE_MATCH_6}")
          set(rest "${CMAKE_MATCH_7}")
          string(LENGTH "${suffix}" suffix_len)
          if(suffix_len EQUAL 1)
            set(num "${num}${suffix}")
          endif()
          check_section("${name}" "${num}" "${where}" "${name}.md §${num}")
          set(prev "${num}")
        elseif(rest MATCHES "${RANGE_RE}")
          set(num "${CMAKE_MATCH_4}")
          set(suffix "${CMAKE_MATCH_6}")
          set(rest "${CMAKE_MATCH_7}")
          string(LENGTH "${suffix}" suffix_len)
          if(suffix_len EQUAL 1)
            set(num "${num}${suffix}")
          endif()
          range_numbers("${prev}" "${num}" nums)
          list(REMOVE_ITEM nums "${prev}")
          foreach(n IN LISTS nums)
            check_section("${name}" "${n}" "${where}" "${name}.md §${prev}–${num} (${n})")
          endforeach()
          set(prev "${num}")
        else()
          break()
        endif()
      endwhile()
    endwhile()

    # Equation citations.
    set(rest "${line}")
    while(rest MATCHES "${EQ_RE}")
      set(eqs "${CMAKE_MATCH_1}")
      set(rest "${CMAKE_MATCH_2}")
      while(rest MATCHES "${EQ_MORE_RE}")
        list(APPEND eqs "${CMAKE_MATCH_4}")
        set(rest "${CMAKE_MATCH_5}")
      endwhile()
      foreach(eq IN LISTS eqs)
        list(FIND equations "${eq}" eq_at)
        if(eq_at EQUAL -1)
          list(APPEND failures "${where}: Eq. ${eq} (defined in no docs/design file)")
        else()
          math(EXPR n_resolved "${n_resolved} + 1")
          list(APPEND files_citing "${file}")
          if(VERBOSE)
            message("${where}: Eq. ${eq}")
          endif()
        endif()
      endforeach()
    endwhile()
  endforeach()
endforeach()

if(files_citing)
  list(REMOVE_DUPLICATES files_citing)
endif()
list(LENGTH files_citing n_files)
list(LENGTH scan n_scanned)

if(failures)
  list(LENGTH failures n_failed)
  set(report "")
  foreach(f IN LISTS failures)
    restore_text("${f}" f)
    string(APPEND report "  ${f}\n")
  endforeach()
  message(FATAL_ERROR
    "check_citations: ${n_failed} unresolved design-note citation(s) "
    "(${n_resolved} resolved; ${n_scanned} files scanned):\n${report}")
endif()
string(REPLACE ";" ", " notes_text "${note_names}")
message("check_citations: resolved ${n_resolved} citations from ${n_files} files "
        "(${n_scanned} files scanned; notes: ${notes_text})")
