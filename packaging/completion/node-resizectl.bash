# bash completion for node-resizectl                       -*- shell-script -*-
#
# node-resizectl [--socket PATH] [-o table|json] COMMAND [flags]
# Flags may come before or after the command (Go's flag package: one or two
# dashes, "--flag value" or "--flag=value"); events has a flag of its own
# (--follow, -f), resize has its own (resources, --set, --release, --clear, --wait,
# --timeout, --kubeconfig, --node-name). Commands take no arguments.

_node_resizectl() {
	local cur prev cmd i w
	COMPREPLY=()
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=""
	[ "$COMP_CWORD" -gt 0 ] && prev=${COMP_WORDS[COMP_CWORD - 1]}

	# "--socket=PA<TAB>": bash splits at "=" (COMP_WORDBREAKS), so the flag
	# is two words back.
	if [ "$prev" = "=" ] && [ "$COMP_CWORD" -gt 1 ]; then
		prev=${COMP_WORDS[COMP_CWORD - 2]}
	elif [ "$cur" = "=" ]; then
		cur=""
	fi

	case $prev in
	-socket | --socket)
		compopt -o filenames 2>/dev/null
		mapfile -t COMPREPLY < <(compgen -f -- "$cur") # names with spaces stay whole
		return 0
		;;
	-o | --o | -output | --output)
		mapfile -t COMPREPLY < <(compgen -W "table json" -- "$cur")
		return 0
		;;
	-kubeconfig | --kubeconfig)
		compopt -o filenames 2>/dev/null
		mapfile -t COMPREPLY < <(compgen -f -- "$cur")
		return 0
		;;
	-set | --set)
		compopt -o nospace 2>/dev/null
		mapfile -t COMPREPLY < <(compgen -W "cpu= memory= ephemeral-storage= hugepages-2Mi= hugepages-1Gi=" -- "$cur")
		return 0
		;;
	-cpu | --cpu | -memory | --memory | -ephemeral-storage | --ephemeral-storage | \
		-hugepages-* | --hugepages-* | -timeout | --timeout | -node-name | --node-name)
		return 0 # a value of the user's
		;;
	esac

	# The command is the first word that is neither a flag nor a flag's value.
	cmd=""
	i=1
	while [ "$i" -lt "$COMP_CWORD" ]; do
		w=${COMP_WORDS[i]}
		case $w in
		-socket | --socket | -o | --o | -output | --output)
			# The value is the next word, or the two after "=".
			if [ "${COMP_WORDS[i + 1]}" = "=" ]; then
				i=$((i + 2))
			else
				i=$((i + 1))
			fi
			;;
		-*) ;;
		*)
			cmd=$w
			break
			;;
		esac
		i=$((i + 1))
	done

	case $cur in
	-*)
		local flags="--socket --output -o --help"
		[ "$cmd" = "events" ] && flags="$flags --follow -f"
		[ "$cmd" = "resize" ] && flags="$flags --cpu --memory --ephemeral-storage --hugepages-2Mi --hugepages-1Gi --set --release --clear --wait --timeout --kubeconfig --node-name"
		mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")
		return 0
		;;
	esac
	if [ -z "$cmd" ]; then
		mapfile -t COMPREPLY < <(compgen -W "status topology events resync version resize help" -- "$cur")
	fi
	return 0
}

complete -F _node_resizectl node-resizectl
