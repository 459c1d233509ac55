import FerrySyncModel
import Foundation

// The sync model test's scenarios, built optimized (`swift build -c release --product
// ferry-sync-model`): see `ferry-sync-model --help`.
exit(SyncModelCommand.main(Array(CommandLine.arguments.dropFirst())))
