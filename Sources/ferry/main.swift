import FerryCommands
import Foundation

exit(Ferry.run(arguments: Array(CommandLine.arguments.dropFirst())))
