import FerryCommands
import Foundation

// A file that may not grow (`ulimit -f`) fails the write with EFBIG, reported as an error,
// instead of killing the process with SIGXFSZ.
signal(SIGXFSZ, SIG_IGN)
exit(Ferry.run(arguments: Array(CommandLine.arguments.dropFirst())))
