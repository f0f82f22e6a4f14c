# Bash completion for abf: subcommands, their options, the values of options
# with a fixed set (--backend, --input-format, ...) and file names. Installed
# as share/bash-completion/completions/abf, which bash-completion loads the
# first time `abf` is completed; or source this file.
#
# It knows no command, option or value itself: it asks the binary being
# completed (`abf completion`, a hidden subcommand that prints the binary's
# own command-line definitions) once per binary and shell, so it lists
# exactly the backends and options that binary has.

# Reads the command tree of binary $1 into _abf_sub, _abf_flag, _abf_opt and
# _abf_choices, keyed by command path ("abf", "abf/catalog/add"; choices by
# "PATH OPTION").
_abf_load() {
  local binary=$1 kind path rest
  [[ ${_abf_loaded_from-} == "$binary" ]] && return 0
  unset _abf_sub _abf_flag _abf_opt _abf_choices
  declare -gA _abf_sub=() _abf_flag=() _abf_opt=() _abf_choices=()
  while read -r kind path rest; do
    case $kind in
      sub) _abf_sub[$path]=$rest ;;
      flag) _abf_flag[$path]=$rest ;;
      opt) _abf_opt[$path]=$rest ;;
      choices) _abf_choices["$path ${rest%% *}"]=${rest#* } ;;
    esac
  done < <("$binary" completion 2>/dev/null)
  ((${#_abf_sub[@]})) || return 1
  _abf_loaded_from=$binary
}

# Whether word $1 is one of the space-separated words in $2.
_abf_has() {
  [[ -n $1 && " $2 " == *" $1 "* ]]
}

_abf_files() {
  local IFS=$'\n'
  COMPREPLY=($(compgen -f -- "$1"))
  compopt -o filenames 2>/dev/null
}

_abf() {
  local binary=${COMP_WORDS[0]}
  [[ $binary == "~/"* ]] && binary=$HOME/${binary#"~/"}
  _abf_load "$binary" || return 0

  local cur=${COMP_WORDS[COMP_CWORD]}
  local prev=${COMP_WORDS[COMP_CWORD - 1]-}
  # COMP_WORDBREAKS splits `--backend=si` into `--backend`, `=`, `si`.
  if [[ $cur == "=" ]]; then
    cur=""
  elif [[ $prev == "=" ]]; then
    prev=${COMP_WORDS[COMP_CWORD - 2]-}
  fi

  # The subcommand path so far; an option's value is never a subcommand.
  local path=abf word i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if _abf_has "$word" "${_abf_sub[$path]-}"; then
      path+=/$word
    elif _abf_has "$word" "${_abf_opt[$path]-}"; then
      ((i++))
      [[ ${COMP_WORDS[i]-} == "=" ]] && ((i++))
    fi
  done

  if _abf_has "$prev" "${_abf_opt[$path]-}"; then
    local choices=${_abf_choices["$path $prev"]-}
    if [[ -n $choices ]]; then
      COMPREPLY=($(compgen -W "$choices" -- "$cur"))
    else
      _abf_files "$cur"
    fi
  elif [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "${_abf_flag[$path]-} ${_abf_opt[$path]-}" -- "$cur"))
  elif [[ -n ${_abf_sub[$path]-} ]]; then
    COMPREPLY=($(compgen -W "${_abf_sub[$path]}" -- "$cur"))
  else
    _abf_files "$cur"
  fi
  return 0
}

complete -F _abf abf
