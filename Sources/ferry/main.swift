import FerryCommands
import FerryService
import Foundation

ProcessMemory.keepFreedPagesNearby()
exit(Ferry.run(arguments: Array(CommandLine.arguments.dropFirst())))
